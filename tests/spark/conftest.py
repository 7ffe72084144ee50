"""The one RayDP Spark session all Spark tests share: starting one costs 10-60 s on a small
machine, so it is session-scoped and runs on the shared ``kcluster``'s Ray."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark(kcluster):
    from kcoord import spark as ks

    session = ks.session(kcluster, executors=2, cores=1, memory="1G", configs={"spark.task.maxFailures": "4"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    ks.stop()
