"""The direct-call channel (kcoord.calls.channel, .direct) between two asyncio loops, and the
call stack on top of it (kcoord.calls.ActorCalls, BlockingCalls), without Ray: answers in
any order, errors, a server that goes away, refused endpoints, bad frames, the verdicts."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from kcoord.calls import DEAD, ERROR, TIMEOUT, ActorCalls, BlockingCalls, CallFailed, HandleCache, blocking
from kcoord.calls import channel
from kcoord.calls.channel import HEADER, ChannelClient, ChannelServer, ChannelUnavailable, Endpoint, RemoteError
from kcoord.calls.direct import DirectCalls

pytestmark = pytest.mark.skipif(not channel.enabled(), reason="channels need Linux abstract sockets")


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


async def until(condition, what: str, timeout: float = 5.0) -> None:
    """Yield to the loop until ``condition()`` holds, at most ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def serving(echo=None):
    """A server on ``echo`` (an Echo by default) and a client, both closed at the end."""
    echo = echo or Echo()
    server = ChannelServer(echo, "node-a")
    ep = await server.start()
    client = ChannelClient()
    try:
        yield echo, server, ep, client
    finally:
        client.close()
        server.close()


class Echo:
    """A dispatch whose 'fetch' parks until released and whose 'produce' answers at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, method: str, payload: bytes) -> bytes:
        self.seen.append((method, payload))
        if method == "fetch":
            await self.release.wait()
        if payload == b"boom":
            raise ValueError("no such offset")
        return method.encode() + b":" + payload


def test_answers_come_back_in_any_order_on_one_connection() -> None:
    async def main():
        async with serving() as (echo, server, ep, client):
            parked = asyncio.ensure_future(client.call(ep, "fetch", b"f1", timeout=5))
            await until(lambda: echo.seen, "the fetch to arrive")
            assert await client.call(ep, "produce", b"p1", timeout=5) == b"produce:p1"
            assert not parked.done()  # a parked fetch does not hold up the produce behind it
            echo.release.set()
            assert await parked == b"fetch:f1"
            big = bytes(range(256)) * 40_000  # 10 MB: frames larger than any socket buffer
            assert await client.call(ep, "produce", big, timeout=5) == b"produce:" + big
            assert len(client._connections) == 1 and server.served == 3

    run(main())


def test_a_method_that_raises_is_a_remote_error_and_the_connection_stays_up() -> None:
    async def main():
        async with serving() as (_, _, ep, client):
            with pytest.raises(RemoteError, match="ValueError: no such offset"):
                await client.call(ep, "produce", b"boom", timeout=5)
            assert await client.call(ep, "produce", b"ok", timeout=5) == b"produce:ok"

    run(main())


def test_a_timeout_leaves_the_connection_usable() -> None:
    async def main():
        async with serving() as (echo, _, ep, client):
            with pytest.raises(asyncio.TimeoutError):
                await client.call(ep, "fetch", b"slow", timeout=0.05)
            echo.release.set()  # its late answer must be dropped, not given to the next call
            assert await client.call(ep, "produce", b"next", timeout=5) == b"produce:next"

    run(main())


def test_a_server_that_goes_away_fails_calls_in_flight_as_sent_and_new_ones_as_not_sent() -> None:
    async def main():
        async with serving() as (echo, server, ep, client):
            parked = asyncio.ensure_future(client.call(ep, "fetch", b"f", timeout=5))
            await until(lambda: echo.seen, "the fetch to arrive")
            server.close()  # cancels the parked fetch: its connection closes with no answer
            with pytest.raises(ChannelUnavailable) as exc:
                await parked
            assert exc.value.sent
            with pytest.raises(ChannelUnavailable) as exc:
                await client.call(ep, "produce", b"p", timeout=5)
            assert not exc.value.sent  # refused: the request never left

    run(main())


def test_a_bad_frame_closes_that_connection_only() -> None:
    async def main():
        async with serving() as (_, server, ep, client):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(ep.address)
            sock.sendall(HEADER.pack(10, 1, 200) + b"x" * 10)  # method 200 does not exist
            sock.setblocking(False)
            closed = await asyncio.wait_for(asyncio.get_running_loop().sock_recv(sock, 10), 5)
            assert closed == b""  # closed by the server
            sock.close()
            assert server.rejected == 1
            assert await client.call(ep, "produce", b"fine", timeout=5) == b"produce:fine"

    run(main())


class FakeHandle:
    """What DirectCalls needs of a Ray actor handle: ``channel.remote()`` to await."""

    def __init__(self, endpoint: Endpoint | None) -> None:
        self.endpoint = endpoint
        self.asked = 0
        handle = self

        class _Method:
            def remote(self):
                handle.asked += 1
                fut = asyncio.get_running_loop().create_future()
                fut.set_result(handle.endpoint.to_wire() if handle.endpoint else None)
                return fut

        self.channel = _Method()


def test_direct_calls_use_only_same_node_endpoints_and_give_up_on_one_refused_twice() -> None:
    async def main():
        server = ChannelServer(Echo(), "node-a")
        ep = await server.start()
        direct = DirectCalls("node-a")
        here = FakeHandle(ep)
        assert await direct.call("r0", here, "produce", b"x", 5) == b"produce:x"
        assert await direct.call("r0", here, "produce", b"y", 5) == b"produce:y"
        assert here.asked == 1  # the endpoint is asked once and kept
        elsewhere = FakeHandle(Endpoint("node-b", ep.address))
        assert await direct.call("r1", elsewhere, "produce", b"x", 5) is None  # another node: use Ray
        assert await direct.call("r2", FakeHandle(None), "produce", b"x", 5) is None  # no channel

        server.close()  # the socket name is released; the client's connection sees the close
        await until(lambda: ep not in direct.client._connections, "the client to drop its connection")
        stale = FakeHandle(ep)
        assert await direct.call("r3", stale, "produce", b"x", 5) is None  # refused: send through Ray
        assert await direct.call("r3", stale, "produce", b"x", 5) is None  # same endpoint again: Ray only
        assert await direct.call("r3", stale, "produce", b"x", 5) is None
        assert stale.asked == 2
        restarted = ChannelServer(Echo(), "node-a")  # the actor came back: a new endpoint
        stale.endpoint = await restarted.start()
        direct.forget("r3")
        assert await direct.call("r3", stale, "produce", b"z", 5) == b"produce:z"
        direct.client.close()
        restarted.close()

    run(main())


def test_a_connection_broken_from_the_far_end_names_its_actor_once_and_our_own_close_does_not() -> None:
    """The controller beats a replica at once when this fires: with a call in flight (the
    failed call must not hide the name) and with none."""

    async def main():
        lost: list[str] = []
        direct = DirectCalls("node-a", on_lost=lost.append)
        echo = Echo()
        busy, idle = ChannelServer(echo, "node-a"), ChannelServer(Echo(), "node-a")
        busy_ep, idle_ep = await busy.start(), await idle.start()
        assert await direct.call("idle", FakeHandle(idle_ep), "produce", b"x", 5) == b"produce:x"
        parked = asyncio.ensure_future(direct.call("busy", FakeHandle(busy_ep), "fetch", b"f", 5))
        await until(lambda: echo.seen, "the fetch to arrive")
        assert direct.connected() == ["busy", "idle"]
        busy.close()
        with pytest.raises(ChannelUnavailable):
            await parked
        await until(lambda: lost == ["busy"], "the busy actor to be reported lost")
        idle.close()
        await until(lambda: lost == ["busy", "idle"], "the idle actor to be reported lost")
        assert direct.connected() == []

        again = ChannelServer(Echo(), "node-a")
        ep = await again.start()
        assert await direct.call("again", FakeHandle(ep), "produce", b"x", 5) == b"produce:x"
        conn = direct.client._connections[ep]
        direct.client.close()  # our own close: not a lost peer
        await until(lambda: conn.task.done() and conn.broken is not None, "the connection to close")
        again.close()
        for _ in range(2):  # a loss reported by the closed task would have run by now (call_soon)
            await asyncio.sleep(0)
        assert lost == ["busy", "idle"]

    run(main())


def test_a_channel_that_broke_or_refused_makes_its_actor_a_suspect_until_it_answers() -> None:
    """A suspect's next call through Ray asks the GCS at once and often (actors/runtime.py):
    the quickest way to learn a death on this node. Whatever answers clears it."""

    async def main():
        lost: list[str] = []
        direct = DirectCalls("node-a", on_lost=lost.append)
        echo = Echo()
        server = ChannelServer(echo, "node-a")
        handle = FakeHandle(await server.start())
        assert await direct.call("r0", handle, "produce", b"x", 5) == b"produce:x"
        assert not direct.is_suspect("r0")

        parked = asyncio.ensure_future(direct.call("r0", handle, "fetch", b"f", 5))
        await until(lambda: echo.seen[-1][0] == "fetch", "the fetch to arrive")
        server.close()  # its process dies with a call in flight
        with pytest.raises(ChannelUnavailable):
            await parked
        assert direct.is_suspect("r0")
        await until(lambda: lost == ["r0"], "the loss to be reported")

        restarted = ChannelServer(Echo(), "node-a")  # Ray restarted it: a new endpoint
        handle.endpoint = await restarted.start()
        assert await direct.call("r0", handle, "produce", b"y", 5) == b"produce:y"
        assert not direct.is_suspect("r0")  # it answered

        idle = ChannelServer(Echo(), "node-a")
        idle_handle = FakeHandle(await idle.start())
        assert await direct.call("r1", idle_handle, "produce", b"x", 5) == b"produce:x"
        idle.close()  # dies with nothing in flight: the broken connection alone tells
        await until(lambda: direct.is_suspect("r1"), "r1 to become a suspect")

        plain = DirectCalls("node-a")  # no watcher: a refused endpoint tells
        refusing = ChannelServer(Echo(), "node-a")
        refusing_handle = FakeHandle(await refusing.start())
        assert await plain.call("r2", refusing_handle, "produce", b"x", 5) == b"produce:x"
        refusing.close()
        await until(lambda: refusing_handle.endpoint not in plain.client._connections, "the connection to drop")
        assert not plain.is_suspect("r2")
        assert await plain.call("r2", refusing_handle, "produce", b"x", 5) is None  # refused: through Ray
        assert plain.is_suspect("r2")
        plain.clear_suspect("r2")  # answered through Ray
        assert not plain.is_suspect("r2")
        for d in (direct, plain):
            d.client.close()
        restarted.close()

    run(main())


class StartingHandle(FakeHandle):
    """An actor whose first ``failures`` endpoint lookups fail, as one still starting."""

    def __init__(self, endpoint: Endpoint | None, failures: int) -> None:
        super().__init__(endpoint)
        handle = self

        class _Method:
            def remote(self):
                handle.asked += 1
                fut = asyncio.get_running_loop().create_future()
                if handle.asked <= failures:
                    fut.set_exception(RuntimeError("the actor is not ready"))
                else:
                    fut.set_result(handle.endpoint.to_wire() if handle.endpoint else None)
                return fut

        self.channel = _Method()


def test_a_watcher_connects_to_an_actor_whose_lookup_failed_without_waiting_for_its_next_call() -> None:
    """The controller's heartbeats may be seconds apart; the death of a replica it holds no
    connection to is noticed only at the next one. So a failed lookup is retried in the
    background where deaths are watched, and nowhere else."""

    async def main():
        server = ChannelServer(Echo(), "node-a")
        ep = await server.start()
        watcher = DirectCalls("node-a", on_lost=lambda name: None)
        starting = StartingHandle(ep, failures=2)
        assert await watcher.call("r0", starting, "heartbeat", b"x", 5) is None  # through Ray this time
        assert watcher.connected() == []
        await until(lambda: watcher.connected() == ["r0"], "the watcher to connect on its own")
        assert starting.asked == 3  # one call, then retries until the actor answered
        assert await watcher.call("r0", starting, "heartbeat", b"y", 5) == b"heartbeat:y"
        assert starting.asked == 3

        plain = DirectCalls("node-a")
        other = StartingHandle(ep, failures=1)
        assert await plain.call("r0", other, "fetch", b"x", 5) is None
        assert not plain._watching  # no retry scheduled: its next call looks up again
        assert other.asked == 1 and plain.connected() == []
        watcher.client.close()
        server.close()

    run(main())


class Replica(FakeHandle):
    """A fake replica's handle for ActorCalls: its endpoint, and Ray methods answering
    ``ray:<method>:<payload>`` (or raising ``ray_error``)."""

    def __init__(self, endpoint: Endpoint | None) -> None:
        super().__init__(endpoint)
        self.ray_calls: list[str] = []
        self.ray_error: BaseException | None = None
        handle = self

        class _RayMethod:
            def __init__(self, name: str) -> None:
                self.name = name

            def remote(self, payload: bytes = b""):
                handle.ray_calls.append(self.name)
                fut = asyncio.get_running_loop().create_future()
                if handle.ray_error is not None:
                    fut.set_exception(handle.ray_error)
                else:
                    fut.set_result(b"ray:" + self.name.encode() + b":" + payload)
                return fut

        for name in channel.METHODS + ("describe",):
            setattr(self, name, _RayMethod(name))


class KnownHandles(HandleCache):
    """Handles of the actors the test made; any other name is no actor (Ray is not asked)."""

    def lookup(self, name: str):
        if name not in self:
            raise ValueError(f"no actor {name!r}")
        return self[name]


def calls_with(handle: FakeHandle, direct: bool = True) -> ActorCalls:
    handles = KnownHandles("ns")
    handles["r0"] = handle
    return ActorCalls("ns", handles=handles, direct=DirectCalls("node-a") if direct else None)


def test_actor_calls_use_the_channel_where_they_can_and_ray_where_they_must() -> None:
    async def main():
        echo = Echo()
        server = ChannelServer(echo, "node-a")
        handle = Replica(await server.start())
        calls = calls_with(handle)
        assert await calls.call("r0", "produce", b"x", timeout=5) == b"produce:x"  # over the channel
        assert await calls.call("r0", "describe", timeout=5) == b"ray:describe:"  # not a channel method
        handle.endpoint = Endpoint("node-b", handle.endpoint.address)
        other = calls_with(handle)  # the same replica seen from another node
        assert await other.call("r0", "produce", b"y", timeout=5) == b"ray:produce:y"
        assert handle.ray_calls == ["describe", "produce"]
        calls.close()
        server.close()

    run(main())


def test_the_verdicts_of_a_call_and_which_forget_the_handle() -> None:
    async def main():
        echo = Echo()
        server = ChannelServer(echo, "node-a")
        handle = Replica(await server.start())
        calls = calls_with(handle)
        with pytest.raises(CallFailed) as failed:
            await calls.call("r0", "produce", b"boom", timeout=5)  # raised in the actor
        assert failed.value.kind == ERROR and "r0" in calls.handles
        with pytest.raises(CallFailed) as failed:
            await calls.call("r0", "fetch", b"parked", timeout=0.05)  # no answer in time
        assert failed.value.kind == TIMEOUT and "r0" not in calls.handles  # looked up again next time
        calls.handles["r0"] = handle
        with pytest.raises(CallFailed) as failed:
            await calls.call("nobody", "produce", b"x", timeout=5)
        assert failed.value.kind == DEAD and failed.value.kafka_name == "NETWORK_EXCEPTION"
        calls.close()
        server.close()

    run(main())


def test_a_broken_channel_fails_a_produce_as_dead_and_sends_a_read_again_through_ray() -> None:
    """A produce may have run when its connection broke: DEAD, as a Ray call to an actor
    that died. A fetch changes nothing: it goes again through Ray, whose verdict stands
    (here: an answer -- Ray restarted the actor)."""

    async def main():
        echo = Echo()
        server = ChannelServer(echo, "node-a")
        handle = Replica(await server.start())
        calls = calls_with(handle)
        assert await calls.call("r0", "produce", b"warm", timeout=5) == b"produce:warm"
        fetch = await calls.submit("r0", "fetch", b"f", timeout=5)
        await until(lambda: echo.seen[-1][0] == "fetch", "the fetch to arrive")
        server.close()  # its process dies with the fetch in flight
        assert await fetch == b"ray:fetch:f"
        assert not calls.direct.is_suspect("r0")  # Ray answered for it
        restarted = ChannelServer(echo, "node-a")
        handle.endpoint = await restarted.start()
        assert await calls.call("r0", "produce", b"again", timeout=5) == b"produce:again"
        produce = await calls.submit("r0", "produce", b"p", timeout=5)
        restarted.close()
        with pytest.raises(CallFailed) as failed:
            await produce
        assert failed.value.kind == DEAD and handle.ray_calls == ["fetch"]
        calls.close()

    run(main())


def test_blocking_calls_run_on_one_loop_thread_and_refuse_to_wait_for_themselves() -> None:
    blocking = BlockingCalls()
    try:
        server = ChannelServer(Echo(), "node-a")
        handle = Replica(blocking.start(server.start()).result(5))
        calls = calls_with(handle)
        assert blocking.run(calls.call("r0", "produce", b"x", timeout=5)) == b"produce:x"

        async def nested():
            return blocking.run(calls.call("r0", "produce", b"y", timeout=5))

        with pytest.raises(RuntimeError, match="wait for itself"):
            blocking.run(nested())
        blocking.start(_close(calls, server)).result(5)
    finally:
        blocking.stop()
        blocking.loop.close()


def test_blocking_makes_the_synchronous_flavour_of_a_coroutine_method() -> None:
    class Client:
        def __init__(self) -> None:
            self.calls = BlockingCalls()
            self.loops: list[object] = []

        async def aanswer(self, x: int, *, plus: int = 0) -> int:
            """Add."""
            self.loops.append(asyncio.get_running_loop())
            return x + plus

        answer = blocking(aanswer)

    class Overriding(Client):
        async def aanswer(self, x: int, *, plus: int = 0) -> int:
            return -x

    c = Client()
    try:
        assert c.answer(2, plus=3) == 5
        assert c.loops == [c.calls.loop]  # ran on the calls thread's loop
        assert Client.answer.__name__ == "answer" and Client.answer.__doc__.startswith("Add.")
        o = Overriding()
        assert o.answer(2) == -2  # the flavour calls the instance's coroutine, overrides too
        o.calls.close()
    finally:
        c.calls.close()
    with pytest.raises(ValueError, match="a-prefixed"):
        blocking(Client.__init__)  # type: ignore[arg-type]


async def _close(calls: ActorCalls, server: ChannelServer) -> None:
    calls.close()
    server.close()


def test_a_forked_child_gets_its_own_calls_thread(monkeypatch):
    """A child forked after the parent made calls inherits the shared instance but not its
    thread: it must not schedule calls on a loop nobody runs (they would hang)."""
    import os

    monkeypatch.setattr(BlockingCalls, "_shared", None)
    parent = BlockingCalls.shared()
    assert BlockingCalls.shared() is parent
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a new instance whose thread runs
        child = BlockingCalls.shared()
        ok = child is not parent and child.thread.is_alive() and child.run(asyncio.sleep(0, "ran")) == "ran"
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    parent.stop()
    parent.loop.close()


_EXIT_WITH_A_CONNECTION_OPEN = """
import sys
from kcoord.calls import BlockingCalls
from kcoord.calls.channel import ChannelClient, Endpoint

async def main():
    return await ChannelClient().call(Endpoint("node-a", "\\0" + sys.argv[1]), "produce", b"x", timeout=5)

print(BlockingCalls.shared().run(main()))
"""


def test_a_process_that_exits_with_channel_connections_open_closes_them_quietly() -> None:
    """A synchronous caller (the CLI, a script with a consumer) exits without closing
    anything while the replica it called lives on: the calls thread's connections are
    closed at exit, with no "Task was destroyed but it is pending!" for their readers on
    stderr."""
    import subprocess
    import sys

    replica = BlockingCalls()  # the replica's process: this one, on a loop of its own
    server = ChannelServer(Echo(), "node-a")
    try:
        ep = replica.start(server.start()).result(5)
        name = ep.address[1:]  # an abstract socket's address: a NUL, then its name
        proc = subprocess.run([sys.executable, "-c", _EXIT_WITH_A_CONNECTION_OPEN, name], capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "b'produce:x'", "")
    finally:
        replica.loop.call_soon_threadsafe(server.close)
        replica.stop()
        replica.loop.close()


def test_a_call_through_ray_cancelled_by_its_caller_leaves_no_wait_behind() -> None:
    """A sender that closes cancels its calls still waiting: the wait on the Ray answer
    ends with them (not a task destroyed pending when the loop closes)."""
    from kcoord.calls import Probing, call_probing

    async def main():
        before = asyncio.all_tasks()
        never = asyncio.get_running_loop().create_future()  # a Ray answer that never comes
        call = asyncio.ensure_future(call_probing(never, None, None, Probing.every(60)))
        await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await until(lambda: never.cancelled(), "the wait on the answer to be cancelled", timeout=1)
        assert asyncio.all_tasks() == before

    run(main())
