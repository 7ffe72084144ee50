"""The one table of who serves what (kcoord.protocol.services) and the shells built from it."""

import asyncio
import inspect

import pytest

from actors.controller import FailoverCoordinator
from actors.group_coordinator import GroupCoordinatorActor
from actors.replica import ReplicaActor
from actors.runtime import rpc_methods, serve_encoded
from kcoord.protocol.controller import MetadataRequest, MetadataResponse
from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.group import JoinGroupRequest, OffsetCommitRequest
from kcoord.protocol.replication import FetchRequest
from kcoord.protocol.services import CONTROLLER, GROUP_COORDINATOR, REPLICA, RESPONSE_FOR, SERVICES, Service, error_response


def test_every_request_a_service_serves_has_a_response_type() -> None:
    for service in SERVICES:
        for name, request_type in service.methods.items():
            assert request_type in RESPONSE_FOR, (service.name, name)
            assert RESPONSE_FOR[request_type].IS_RESPONSE


@pytest.mark.parametrize("shell, service", [(ReplicaActor, REPLICA), (FailoverCoordinator, CONTROLLER), (GroupCoordinatorActor, GROUP_COORDINATOR)])
def test_a_shell_has_one_async_rpc_method_per_row_of_its_service(shell: type, service: Service) -> None:
    for name, request_type in service.methods.items():
        method = getattr(shell, name)
        assert inspect.iscoroutinefunction(method) and method.__name__ == name
        assert request_type.__name__ in method.__doc__


def test_a_hand_written_rpc_method_is_refused() -> None:
    class Shell:
        async def metadata(self, data: bytes) -> bytes:
            return data

    with pytest.raises(TypeError, match="metadata"):
        rpc_methods(CONTROLLER)(Shell)


def test_a_service_refuses_a_request_it_does_not_serve() -> None:
    with pytest.raises(TypeError, match="a replica does not serve MetadataRequest"):
        REPLICA.check(MetadataRequest([]))
    assert CONTROLLER.check(MetadataRequest([])) is MetadataResponse


def test_error_responses_fill_items_where_clients_read_items() -> None:
    commit = OffsetCommitRequest("g", topics={"t": {0: 5, 1: 6}})
    response = error_response(commit, ErrorCode.NOT_COORDINATOR, "moved")
    assert response.error_code == ErrorCode.NOT_COORDINATOR and response.topics == {"t": {0: 16, 1: 16}}
    fetch = error_response(FetchRequest("t", 0, 0), ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert fetch.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with pytest.raises(TypeError):
        error_response(MetadataResponse(), 1)


def test_malformed_bytes_get_the_decoders_error_and_nothing_is_served() -> None:
    served = []
    response = asyncio.run(serve_encoded(b"\xc1 not msgpack", JoinGroupRequest, lambda req, reply: served.append(req)))
    assert served == [] and response.error_code != 0 and type(response) is RESPONSE_FOR[JoinGroupRequest]


def test_a_served_request_gets_the_one_reply() -> None:
    def serve(request, reply):
        reply(MetadataResponse(error_code=0))
        reply(MetadataResponse(error_code=7))  # a second reply is dropped

    response = asyncio.run(serve_encoded(MetadataRequest([]).encode(), MetadataRequest, serve))
    assert response.error_code == 0
