"""``[store] cluster``: ``toolguard check`` validates it with the rest of ``[store]``, the
environment sets it (``TOOLGUARD_STORE__CLUSTER``), and startup nodes parse from ``url``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolguard._errors import PolicyError
from toolguard.cli import app
from toolguard.policy._loader import load_policy, policy_from_env

NODES = "redis://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3"


def _problems(tmp_path: Path, store: str) -> list[str]:
    path = tmp_path / "p.toml"
    path.write_text(f"[store]\n{store}\n", encoding="utf-8")
    try:
        load_policy(path)
    except PolicyError as error:
        return [str(p).split(": ", 1)[1] for p in error.problems]
    return []


def test_a_cluster_with_startup_nodes_is_valid(tmp_path: Path) -> None:
    assert _problems(tmp_path, f'backend = "redis"\ncluster = true\nurl = "{NODES}"') == []
    path = tmp_path / "p.toml"
    assert load_policy(path).store.cluster is True


@pytest.mark.parametrize(("store", "message"), [
    ('backend = "memory"\ncluster = true\nurl = "redis://a:7000"',
     'store.cluster: needs store.backend = "redis"'),
    ('backend = "redis"\ncluster = true',
     "store.cluster: needs store.url: the cluster's startup nodes"),
    ('cluster = true\nurl = "unix:///tmp/redis.sock"',
     "store.cluster: needs startup nodes with a host and port, not \"unix:///tmp/redis.sock\""),
    ('cluster = true\nurl = "redis://a:7000/0,redis://b:7000/3"',
     "store.cluster: a Redis Cluster has only database 0, but \"redis://b:7000/3\" names "
     "database 3"),
    (f'backend = "redis"\nurl = "{NODES}"',
     "store.url: several comma-separated URLs are a cluster's startup nodes: set "
     "store.cluster = true, or give one URL"),
    ('cluster = "yes"', "store.cluster: "),
])
def test_check_refuses_a_combination_that_cannot_work(tmp_path: Path, store: str,
                                                      message: str) -> None:
    problems = _problems(tmp_path, store)
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_toolguard_check_prints_it(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[store]\nbackend = "redis"\ncluster = true\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["check", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3:1: store.cluster: needs store.url" in result.output


def test_environment_sets_cluster() -> None:
    policy = policy_from_env({"TOOLGUARD_STORE__BACKEND": "redis",
                              "TOOLGUARD_STORE__URL": NODES,
                              "TOOLGUARD_STORE__CLUSTER": "true"})
    assert (policy.store.cluster, policy.store.url) == (True, NODES)
    with pytest.raises(PolicyError, match=r"store\.cluster"):
        policy_from_env({"TOOLGUARD_STORE__CLUSTER": "true"})


def test_startup_nodes() -> None:
    from toolguard.stores.redis import startup_nodes

    assert startup_nodes(NODES) == [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.3", 6379)]
    assert startup_nodes("rediss://a:1, b:2") == [("a", 1), ("b", 2)]
    for bad in ("redis://a:1,", "unix:///tmp/s", "redis://:5"):
        with pytest.raises(ValueError, match=r"startup node|host and port"):
            startup_nodes(bad)


def test_several_urls_without_cluster_are_refused_by_the_store() -> None:
    from toolguard.stores.redis import RedisStore

    with pytest.raises(ValueError, match="cluster = true"):
        RedisStore(url="redis://a:1,redis://b:2")
