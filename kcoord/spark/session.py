"""A RayDP Spark session on the Ray cluster that runs kcoord.

RayDP runs the Spark executors as Ray actors, so executor tasks reach kcoord's replica and
coordinator actors directly. Settings this module takes care of (all needed on this stack,
see the notes by each):

* JDK 17 refuses Spark's reflective access without ``--add-opens``: the flags go to the
  driver, the executors and RayDP's app master (without the last, the first Ray<->Spark
  object transfer kills the app master and with it the SparkContext).
* ``PYSPARK_PYTHON`` = this interpreter, so executors' Python workers use the same venv.
* ``spark.executorEnv.RAY_ADDRESS`` = this driver's GCS address, so ``ray.init()`` inside
  an executor joins *this* Ray cluster even when several run on the machine; and Ray's
  token authentication as this driver's Ray has it (``RAY_AUTH_MODE``, the token's path
  or value when the driver was given one that way).
* The Ray CPU an executor actor reserves. By default an executor reserves its cores, and
  on a small node the executors then hold every CPU: each Ray task or actor that needs a
  CPU (Ray Data's own tasks included) waits forever. ``executor_cpu`` (auto by default)
  keeps at least one CPU free; Spark's parallelism still comes from ``cores``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Mapping

import ray

from ..client.cluster import ClusterClient

JAVA_OPTIONS = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.math=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
    "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
)
_JAVA_OPTION_KEYS = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)
EXECUTOR_CPU_KEY = "spark.ray.raydp_spark_executor.actor.resource.cpu"


def auto_executor_cpu(executors: int, cores: int, total_cpus: float) -> float:
    """Ray CPUs per executor actor: ``cores`` if that leaves a CPU free, else the share of
    ``total - 1`` (at least 0.1)."""
    if executors * cores <= total_cpus - 1:
        return float(cores)
    share = max(0.1, (total_cpus - 1) / executors)
    return float(min(cores, int(share * 100) / 100))


def ray_auth_configs() -> dict[str, str]:
    """What an executor needs to join this driver's Ray: its token authentication mode
    (the mode this driver's Ray runs with), and where the token is when this driver was
    given one by path or in the environment (otherwise Ray's default, ~/.ray/auth_token
    on the executor's node, as for any Ray worker node)."""
    out = {"spark.executorEnv.RAY_AUTH_MODE": "token" if token_auth_enabled() else "disabled"}
    if out["spark.executorEnv.RAY_AUTH_MODE"] == "token":
        for key in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
            if os.environ.get(key):
                out[f"spark.executorEnv.{key}"] = os.environ[key]
    return out


def token_auth_enabled() -> bool:
    """Whether this process's Ray uses token authentication (Ray >= 2.5x; else False)."""
    try:
        from ray._private.authentication.authentication_utils import is_token_auth_enabled

        return bool(is_token_auth_enabled())
    except Exception:  # noqa: BLE001 - a Ray without token authentication
        return os.environ.get("RAY_AUTH_MODE", "").lower() == "token"


def spark_configs(
    gcs_address: str,
    executors: int,
    cores: int,
    executor_cpu: float | None = None,
    configs: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The Spark settings :func:`session` uses; ``configs`` override them (Java options are
    appended to the required ones, not replaced)."""
    if executor_cpu is None:
        executor_cpu = auto_executor_cpu(executors, cores, float(ray.cluster_resources().get("CPU", 1)))
    java = " ".join(JAVA_OPTIONS)
    out = {
        EXECUTOR_CPU_KEY: f"{executor_cpu:g}",
        "spark.executorEnv.RAY_ADDRESS": gcs_address,
        **ray_auth_configs(),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        # Kafka timestamps are instants; show and collect them in UTC unless told otherwise.
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, executors * cores * 2)),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    for key in _JAVA_OPTION_KEYS:
        out[key] = java
    for key, value in (configs or {}).items():
        value = str(value).lower() if isinstance(value, bool) else str(value)
        if key in _JAVA_OPTION_KEYS:
            out[key] = f"{java} {value}"
        else:
            out[key] = value
    return out


def session(
    cluster: ClusterClient,
    executors: int = 2,
    cores: int = 1,
    memory: str | int = "1G",
    configs: Mapping[str, Any] | None = None,
    *,
    app_name: str = "kcoord",
    executor_cpu: float | None = None,
    warm_up: bool = True,
    startup_timeout_s: float = 300.0,
) -> Any:
    """Start a RayDP SparkSession on the Ray cluster ``cluster`` runs on (see the module doc
    for the settings it makes). One per process, as RayDP allows; :func:`stop` ends it.

    ``executor_cpu`` is the Ray CPU each executor actor reserves (auto: leave one CPU of
    the cluster free). With ``warm_up`` it waits until the executors registered and their
    Python workers connected to Ray and the kcoord cluster, so the first real job does not
    pay 10-20 s of startup.
    """
    from ..extras import require

    require("spark", "kcoord.spark.session()", "pyspark", "raydp")
    import raydp

    if not isinstance(cluster, ClusterClient):
        raise TypeError(f"session() needs a ClusterClient (kcoord.connect() or kcoord.local_cluster()), got {type(cluster).__name__}")
    for name, value in (("executors", executors), ("cores", cores)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if executor_cpu is not None and not (isinstance(executor_cpu, (int, float)) and executor_cpu > 0):
        raise ValueError(f"executor_cpu must be a positive number of Ray CPUs, got {executor_cpu!r}")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    gcs = ray.get_runtime_context().gcs_address
    settings = spark_configs(gcs, executors, cores, executor_cpu, configs)
    try:
        spark = raydp.init_spark(
            app_name=app_name, num_executors=executors, executor_cores=cores, executor_memory=memory, configs=settings
        )
    except Exception as exc:
        if "has inited" in str(exc):
            raise RuntimeError("a RayDP Spark session is already running in this process; call kcoord.spark.stop() first") from None
        raise
    if warm_up:
        try:
            _warm_up(spark, cluster, executors, cores, startup_timeout_s)
        except BaseException:
            stop()
            raise
    return spark


def _warm_up(spark: Any, cluster: ClusterClient, executors: int, cores: int, timeout_s: float) -> None:
    """Wait for the executors to register, then connect each executor's Python worker to
    Ray and the cluster once."""
    from .tasks import ClusterRef

    sc = spark.sparkContext
    deadline = time.monotonic() + timeout_s
    while sc._jsc.sc().getExecutorMemoryStatus().size() - 1 < executors:
        if time.monotonic() >= deadline:
            raise TimeoutError(f"only {sc._jsc.sc().getExecutorMemoryStatus().size() - 1} of {executors} Spark executors registered within {timeout_s:.0f} s")
        time.sleep(0.2)
    ref = ClusterRef.of(cluster)

    def connect(batches: Any) -> Any:
        import pyarrow as pa

        from kcoord.spark.tasks import drop_jars_from_sys_path

        for _ in batches:
            pass
        drop_jars_from_sys_path()
        ref.client()
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})

    # The same kind of job (mapInArrow) and Python workers that reads and writes use.
    n = executors * cores
    spark.range(0, n, 1, n).mapInArrow(connect, "pid long").collect()


def stop(cleanup_data: bool = True) -> None:
    """Stop the RayDP Spark session of this process (if any)."""
    import raydp

    raydp.stop_spark(cleanup_data=cleanup_data)
