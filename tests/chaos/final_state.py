"""The state a chaos run leaves, read once the faults have ended: every replica's log (the
replicas of a healed partition agree byte for byte), the batch shape of a topic, and the
undisturbed catch-up rate the run's is compared with."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from tests.chaos.processes import Clients, run_reader
from tests.chaos.settings import CALM, MIN_ISR, PARTITIONS, READS, TOPIC, log


def read_replica(cluster, topic: str, partition: int, broker: int):
    """(sha256 of the raw log, [(offset, value)], [batch leader epochs]) of one replica."""
    import ray

    from kcoord import records

    handle = cluster.replica(topic, partition, broker, fresh=True)
    digest = hashlib.sha256()
    out: list[tuple[int, bytes]] = []
    epochs: list[int] = []
    offset = 0
    while True:
        raw = ray.get(handle.read_log.remote(offset, 8 << 20), timeout=120)
        if not raw:
            break
        digest.update(raw)
        epochs += [h.leader_epoch for _, h in records.iter_headers(raw)]
        recs = list(records.iter_records(raw, from_offset=offset))
        if not recs:
            break
        out += [(r.offset, r.value) for r in recs]
        offset = recs[-1].offset + 1
    return digest.hexdigest(), out, epochs


def write_final_log(cluster, out: Path, healed: bool) -> tuple[list[int], list[int]]:
    """Read every replica of every partition of the chaos topic; write the leader's records
    (or, for an offline partition, the longest log left) to ``final-log.jsonl`` as
    ``[partition, offset, writer tag]``. Returns the partitions whose replicas differ
    (counted only when the cluster ``healed``) and those whose batch epochs decrease."""
    divergent: list[int] = []
    epochs_decrease: list[int] = []
    with open(out / "final-log.jsonl", "w") as f:
        for pm in cluster.topic(TOPIC, refresh=True).partitions:
            copies = {}
            for b in pm.replicas:
                try:
                    copies[b] = read_replica(cluster, TOPIC, pm.partition, b)
                except Exception as exc:  # noqa: BLE001 - a replica lost with its node
                    log(f"replica {TOPIC}-{pm.partition} of broker {b} unreadable: {exc!r:.200}")
            if not copies:
                continue
            if healed and len({c[0] for c in copies.values()}) != 1:
                divergent.append(pm.partition)
            _, recs, epochs = copies.get(pm.leader) or max(copies.values(), key=lambda c: len(c[1]))
            if epochs != sorted(epochs):
                epochs_decrease.append(pm.partition)
            for o, v in recs:
                f.write(json.dumps([pm.partition, o, v.split(b"|", 1)[0].decode()]) + "\n")
    return divergent, epochs_decrease


def batch_shape(cluster, topic: str) -> dict:
    """Records, batches, mean records and bytes per batch in the leaders' logs of ``topic``."""
    import ray

    from kcoord import records

    n_records = n_batches = n_bytes = 0
    for pm in cluster.topic(topic, refresh=True).partitions:
        if pm.leader < 0:
            continue  # offline (a run that did not heal, which the checker reports)
        handle = cluster.replica(topic, pm.partition, pm.leader, fresh=True)
        offset = 0
        while True:
            raw = ray.get(handle.read_log.remote(offset, 8 << 20), timeout=120)
            headers = [h for _, h in records.iter_headers(raw)] if raw else []
            if not headers:
                break
            n_batches += len(headers)
            n_bytes += len(raw)
            n_records += headers[-1].next_offset - max(offset, headers[0].base_offset)
            offset = headers[-1].next_offset
    return {
        "log_records": n_records,
        "batches": n_batches,
        "records_per_batch": round(n_records / n_batches, 2) if n_batches else 0.0,
        "bytes_per_batch": round(n_bytes / n_batches) if n_batches else 0,
    }


def undisturbed_rate(cluster, admin, clients: Clients, shape: dict) -> dict:
    """The catch-up rate of topic ``calm``, created on the healed cluster and written with
    as many records as the chaos topic holds, with the same keys and value sizes, in batches
    of the chaos topic's mean size; nothing is injected meanwhile."""
    import kcoord
    from tests.chaos.clients import PAD

    admin.create_topic(CALM, partitions=PARTITIONS, replication_factor=3, config={"min.insync.replicas": MIN_ISR})
    admin.wait_for_leaders(CALM)
    from kcoord.client.producer.batch import BATCH_OVERHEAD, record_size

    n = max(1, shape["log_records"])
    # the bulk writer cuts batches by its own estimate of a record's size: aim at the chaos
    # topic's mean records per batch through it
    typical = record_size(b"p9:%d" % (n // 2) + PAD, b"k%d" % 48)
    batch_size = BATCH_OVERHEAD + typical * max(1, round(shape["records_per_batch"]))
    with kcoord.Producer(cluster, acks="all", linger_ms=5) as p:
        step = 50_000
        for lo in range(0, n, step):
            idx = range(lo, min(n, lo + step))
            p.send_batch(CALM, values=[b"p9:%d" % i + PAD for i in idx], keys=[b"k%d" % (i % 97) for i in idx],
                         batch_size=batch_size, timeout=300)
    result = run_reader(clients, CALM, "", timeout=600, repeat=READS)
    result.update(batch_shape(cluster, CALM))
    admin.delete_topic(CALM)
    return result


def catch_up(cluster, admin, clients: Clients, out: Path, baseline: bool) -> dict:
    """The catch-up read of the chaos topic after the run (``READS`` reads, the median
    counts) and, with ``baseline``, the undisturbed rate measured first; their ratios in
    records/s and in batches/s (equal when the batch shapes match, as they should)."""
    result: dict = {"baseline": {}}
    shape = batch_shape(cluster, TOPIC)
    if baseline:
        t0 = time.monotonic()
        try:
            result["baseline"] = undisturbed_rate(cluster, admin, clients, shape)
        except Exception as exc:  # noqa: BLE001 - a run that did not heal: no ratio, the rest is checked
            log(f"the undisturbed rate could not be measured: {exc!r:.300}")
            result["baseline"] = {"error": repr(exc)[:300]}
        result["baseline_s"] = time.monotonic() - t0
        log(f"undisturbed catch-up: {result['baseline']}")
    result["catchup"] = run_reader(clients, TOPIC, str(out / "reader-final.jsonl"), timeout=900, repeat=READS)
    result["catchup"].update(shape)
    base, after = result["baseline"].get("rate", 0.0), result["catchup"].get("rate", 0.0)
    result["catchup_ratio"] = round(after / base, 3) if base else None
    rpb_base, rpb_after = result["baseline"].get("records_per_batch"), result["catchup"].get("records_per_batch")
    result["catchup_ratio_batches"] = round((after / rpb_after) / (base / rpb_base), 3) if base and rpb_base and rpb_after else None
    log(f"catch-up after the run: {result['catchup']} ({result['catchup_ratio']}x the undisturbed rate in records/s, "
        f"{result['catchup_ratio_batches']}x in batches/s)")
    return result
