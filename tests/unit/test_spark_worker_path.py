"""Spark Python workers: the jars Spark puts on ``sys.path`` are taken off, with every
zipimport finder under them, so PySpark's ``importlib.invalidate_caches()`` before each task
does not re-read a jar's directory (5000+ entries of spark-core) in pure Python."""

import importlib
import sys
import zipfile
import zipimport

from kcoord.spark.tasks import drop_jars_from_sys_path


def test_a_jar_and_the_finders_of_namespace_packages_inside_it_are_dropped(tmp_path, monkeypatch):
    jar = tmp_path / "spark-core_2.12-3.5.7.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("org/apache/Foo.class", b"\xca\xfe")
        z.writestr("google/protobuf/x.proto", b"")
    monkeypatch.setattr(sys, "path", [str(jar), *sys.path])
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    # As a worker that imported a namespace package (``google``, ``org``) with the jar on
    # its path has: a finder for the jar's subdirectory, not only for the jar.
    for sub in ("org", "google"):
        sys.path_importer_cache[f"{jar}/{sub}"] = zipimport.zipimporter(f"{jar}/{sub}")
    sys.path_importer_cache[str(jar)] = zipimport.zipimporter(str(jar))

    drop_jars_from_sys_path()

    assert not [p for p in sys.path if str(p).endswith(".jar")]
    assert not [k for k in sys.path_importer_cache if str(k).startswith(str(jar))]


def test_a_jar_put_back_on_the_path_by_the_next_task_is_dropped_again(tmp_path, monkeypatch):
    # PySpark's worker adds the task's includes to sys.path before each task
    jar = tmp_path / "a.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("x.txt", b"")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    for _ in range(2):
        sys.path.insert(1, str(jar))
        importlib.invalidate_caches()
        sys.path_importer_cache[str(jar)] = zipimport.zipimporter(str(jar))
        drop_jars_from_sys_path()
        assert str(jar) not in sys.path and str(jar) not in sys.path_importer_cache
