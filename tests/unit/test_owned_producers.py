"""The controller's producer ids kept per owner (kcoord.replication.owned_producers): each
group coordinator incarnation gets a higher epoch once; replaced ones are fenced."""

from __future__ import annotations

import itertools

from kcoord.protocol.controller import InitProducerIdRequest
from kcoord.protocol.errors import ErrorCode
from kcoord.replication.controller import ControllerState, Persist, Reply
from kcoord.replication.owned_producers import MAX_PRODUCER_EPOCH, OwnedProducer, grant, owned_producer_key

OWNER = "__consumer_offsets-3"


def ask(record, inc, epoch=-1, pid=3, min_epoch=0, fresh=itertools.count(5000)):
    req = InitProducerIdRequest(owner=OWNER, incarnation=inc, producer_id=pid, producer_epoch=epoch, min_epoch=min_epoch)
    new, resp = grant(record, req, lambda: next(fresh))
    return (new if new is not None else record), resp


def test_each_new_incarnation_gets_the_next_epoch_and_retires_the_last():
    rec, a = ask(None, "a", min_epoch=4)  # the log showed epochs up to 3 from before
    assert (a.error_code, a.producer_id, a.producer_epoch) == (0, 3, 4)
    again, a2 = ask(rec, "a")
    assert again == rec and (a2.producer_id, a2.producer_epoch) == (3, 4), "a retry gets the same answer"
    rec, b = ask(rec, "b")
    assert (b.producer_id, b.producer_epoch) == (3, 5) and rec.retired == ["a"]
    for epoch in (-1, 4):  # the replaced incarnation gets nothing, first request or bump
        same, refused = ask(rec, "a", epoch=epoch)
        assert refused.error_code == ErrorCode.PRODUCER_FENCED and same == rec


def test_the_holder_moves_on_by_presenting_its_epoch_and_a_retry_gets_the_same():
    rec, _ = ask(None, "a")
    rec, r1 = ask(rec, "a", epoch=0)
    assert r1.producer_epoch == 1
    same, r2 = ask(rec, "a", epoch=0)  # the answer to the bump was lost: asked again
    assert r2.producer_epoch == 1 and same == rec
    rec, r3 = ask(rec, "a", epoch=1, min_epoch=9)  # the leader showed epoch 8 in use
    assert r3.producer_epoch == 9


def test_past_the_last_epoch_the_owner_moves_to_a_fresh_producer_id():
    rec = OwnedProducer(3, MAX_PRODUCER_EPOCH, "a")
    rec, r = ask(rec, "b", fresh=iter([7777]))
    assert (r.producer_id, r.producer_epoch) == (7777, 0) and rec.incarnation == "b"


def test_bad_requests():
    assert ask(None, "")[1].error_code == ErrorCode.INVALID_REQUEST
    assert ask(None, "a", pid=-1)[1].error_code == ErrorCode.INVALID_REQUEST
    assert ask(None, "a", epoch=2)[1].error_code == ErrorCode.PRODUCER_FENCED  # holds nothing it could present


def test_the_controller_persists_before_it_answers_and_a_restarted_one_remembers():
    store: dict[str, bytes] = {}

    def run(core, request, token):
        actions = core.handle(request, token, 0)
        kinds = [type(a) for a in actions]
        assert kinds.index(Reply) == len(kinds) - 1, "the answer comes after the writes"
        for a in actions:
            if isinstance(a, Persist):
                store[a.key] = a.value
        return actions[-1].response

    core = ControllerState("c")
    for a in core.start({}, [0], 4, 0):
        if isinstance(a, Persist):
            store[a.key] = a.value
    r = run(core, InitProducerIdRequest(owner=OWNER, incarnation="a", producer_id=3), 1)
    assert (r.producer_id, r.producer_epoch) == (3, 0) and owned_producer_key(OWNER) in store
    restarted = ControllerState("c")
    restarted.start(dict(store), [0], 4, 0)
    r = run(restarted, InitProducerIdRequest(owner=OWNER, incarnation="b", producer_id=3), 2)
    assert r.producer_epoch == 1
    r = run(restarted, InitProducerIdRequest(owner=OWNER, incarnation="a", producer_id=3, producer_epoch=0), 3)
    assert r.error_code == ErrorCode.PRODUCER_FENCED
    plain = run(restarted, InitProducerIdRequest(count=2), 4)
    assert plain.error_code == 0 and plain.producer_id >= 1000  # clients' ids are unchanged
