"""The controller's security metadata (SCRAM credentials, ACLs) under the simulation's
faults: controller crashes and pauses, and metadata-store writes that fail or time out.

:class:`SecurityAdmin` alters users and ACLs through the controller's driver as an admin
does (``kcoord.replication.security_metadata``), one request at a time, and keeps a
:class:`SecurityModel` of what the controller acknowledged. Invariant ``security``:

* a change the controller acknowledged is in force from then on (an ACL created is there,
  one deleted is gone, a credential is the one last set) -- a change whose answer never
  came or said REQUEST_TIMED_OUT may or may not be, until a later acknowledged change
  of the same thing settles it;
* a controller's security metadata in memory is exactly what the store holds (persist,
  then tell: a failed write makes the driver reload from the store).

The admin calls the controller process directly (it is paused with it and finds nothing
while it is down), not over the simulated network: what the network can do to a request
only makes outcomes unknown. Its choices come from a generator of its own. It runs when
the run asks for it (``SimConfig.security``, ``python -m tests.sim.run --security``), so
every seed of the usual sweep runs exactly as before it existed.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from kcoord.protocol.errors import ErrorCode
from kcoord.protocol.security import (
    AclFilterRecord,
    AclRecord,
    AlterUserScramCredentialsRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    ScramCredentialRecord,
    ScramDeletion,
    ScramUpsertion,
    UserCredentials,
)
from kcoord.replication.security_metadata import USER_PREFIX, acl_key

from .kernel import run_on

if TYPE_CHECKING:
    from .simulation import Simulation

UNKNOWN = "unknown"
PRESENT = "present"
ABSENT = "absent"
USERS = ("u0", "u1", "u2")


class SecurityModel:
    """What the controller acknowledged: per ACL store key PRESENT/ABSENT/UNKNOWN, per
    user the stored key of its SHA-256 credential, None (deleted) or UNKNOWN."""

    def __init__(self) -> None:
        self.acls: dict[str, str] = {}
        self.users: dict[str, Any] = {}
        self.acked = 0
        self.unknown = 0

    def check(self, sim: "Simulation", core: Any) -> None:
        now = sim.kernel.now
        sec = core.security
        for key, state in sorted(self.acls.items()):
            if state == PRESENT and key not in sec.acls:
                sim.history.fail("security", now, f"acknowledged ACL {key} is gone")
            elif state == ABSENT and key in sec.acls:
                sim.history.fail("security", now, f"ACL {key}, acknowledged as deleted, is back")
        for user, expected in sorted(self.users.items()):
            if expected is UNKNOWN:
                continue
            cred = sec.users.get(user, {}).get(1)
            got = None if cred is None else cred.stored_key
            if got != expected:
                sim.history.fail("security", now, f"user {user}'s credential is not the one last acknowledged ({'deleted' if got is None else 'another'})")
        # persist, then tell: memory equals the store
        stored = {k: sim.store.data[k] for k in sim.store.keys("security/")}
        memory = {key: rec.encode() for key, rec in sec.acls.items()}
        for user, creds in sec.users.items():
            memory[USER_PREFIX + user] = UserCredentials(user, [creds[m] for m in sorted(creds)]).encode()
        if stored != memory:
            missing = sorted(set(memory) - set(stored))[:3]
            extra = sorted(set(stored) - set(memory))[:3]
            sim.history.fail("security", now, f"the controller's security metadata differs from the store (not stored: {missing}, not in memory: {extra})")


class SecurityAdmin:
    def __init__(self, sim: "Simulation") -> None:
        self.sim = sim
        self.rng = random.Random(f"security:{sim.config.seed}")
        self.model = SecurityModel()
        self.waiting = False
        self.next_acl = 0
        self.sent = 0
        self.records: dict[str, AclRecord] = {}

    def start(self) -> None:
        self.sim.kernel.after(self.rng.randint(100, 500), self._tick)

    def _tick(self) -> None:
        if self.sim.phase != "faults":
            return
        if not self.waiting:
            self._one()
        self.sim.kernel.after(self.rng.randint(50, 400), self._tick)

    def _one(self) -> None:
        r = self.rng.random()
        present = sorted(k for k, s in self.model.acls.items() if s != ABSENT)
        if r < 0.4 or not present:
            n = self.next_acl
            self.next_acl += 1
            record = AclRecord(2, f"t{n % 3}", 3 if n % 2 else 4, f"User:p{n}", "*", 3 + n % 5, 3 if n % 4 else 2)
            key = acl_key(record)
            self.records[key] = record
            self.model.acls[key] = UNKNOWN
            self._send(CreateAclsRequest(acls=[record]), lambda resp: self._acl_done(key, resp, PRESENT))
        elif r < 0.65:
            key = self.rng.choice(present)
            rec = self.records[key]
            f = AclFilterRecord(rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal, rec.host, rec.operation, rec.permission_type)
            self.model.acls[key] = UNKNOWN
            self._send(DeleteAclsRequest(filters=[f]), lambda resp: self._acl_done(key, resp, ABSENT))
        else:
            user = self.rng.choice(USERS)
            if r < 0.9:
                salt = self.rng.getrandbits(64).to_bytes(8, "big")
                stored = self.rng.getrandbits(256).to_bytes(32, "big")
                cred = ScramCredentialRecord(1, 4096, salt, stored, stored[::-1])
                req = AlterUserScramCredentialsRequest(upsertions=[ScramUpsertion(user, cred)])
                outcome: Any = stored
            else:
                req = AlterUserScramCredentialsRequest(deletions=[ScramDeletion(user, 1)])
                outcome = None
            before = self.model.users.get(user)
            self.model.users[user] = UNKNOWN
            self._send(req, lambda resp: self._user_done(user, resp, outcome, before))

    def _send(self, request: Any, on_answer) -> None:
        proc = self.sim.controller
        if not proc.up or proc.driver is None:
            self.model.unknown += 1
            return  # nobody to ask (Ray would say the actor is dead): the state stays unknown
        self.waiting = True
        self.sent += 1
        answered = [False]
        incarnation = proc.incarnation

        def reply(response: Any) -> None:
            if answered[0]:
                return
            answered[0] = True
            self.waiting = False
            on_answer(response)

        def serve() -> None:
            if not proc.up or proc.driver is None or proc.incarnation != incarnation:
                give_up()
                return
            proc.driver.serve(request, reply)
            proc.after()

        def give_up() -> None:
            if not answered[0]:
                answered[0] = True
                self.waiting = False
                self.model.unknown += 1

        run_on(proc, serve)
        self.sim.kernel.after(3000, give_up)  # no answer: the outcome stays unknown

    def _acl_done(self, key: str, resp: Any, state: str) -> None:
        results = getattr(resp, "results", None) or []
        if resp.error_code == 0 and results and results[0].error_code == 0:
            self.model.acls[key] = state
            self.model.acked += 1

    def _user_done(self, user: str, resp: Any, outcome: Any, before: Any) -> None:
        results = getattr(resp, "results", None) or []
        if resp.error_code == 0 and results:
            code = results[0].error_code
            if code == 0:
                self.model.users[user] = outcome
                self.model.acked += 1
            elif code == ErrorCode.RESOURCE_NOT_FOUND:
                self.model.users[user] = before if before is not UNKNOWN else None  # nothing to delete: unchanged

    def check(self, core: Any) -> None:
        self.model.check(self.sim, core)

