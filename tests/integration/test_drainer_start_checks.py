"""The drainer's start checks the downstream in every mode, before any actor starts:
a refusal (wrong password) fails at once with what to check, a downstream that does
not answer is retried for a stated time, then the start fails naming the wait. The
``tidb-binlog drainer`` command does it before joining Ray and exits 1."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.drainer import Drainer, check_downstream
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.errors import DownstreamError, UnavailableError
from tidb_binlog.testing.ports import free_port

REPO = Path(__file__).resolve().parents[2]
SECRET = "not-the-password-4711"


def drainer_toml(tmp_path, port, *, password=SECRET, exactly_once=False) -> Path:
    path = tmp_path / "drainer.toml"
    path.write_text(f"""
data-dir = "{tmp_path / 'data'}"
[syncer]
exactly-once = {str(exactly_once).lower()}
[syncer.to]
host = "127.0.0.1"
port = {port}
user = "root"
password = "{password}"
""")
    return path


def closed_port() -> int:
    return free_port()  # nothing listens there, and nothing else picks it meanwhile


def refusal(port: int) -> str:
    return (rf"cannot start: the downstream 127\.0\.0\.1:{port} refused the drainer: "
            rf"connecting to the downstream 127\.0\.0\.1:{port} as 'root'; "
            # MariaDB answers 1045 to a REQUIRE SSL/X509 account reached without TLS too
            rf"if 127\.0\.0\.1:{port} requires TLS \(require_secure_transport, or an "
            r"account created REQUIRE SSL/X509\), set \[syncer\.to\.security\] ssl-ca "
            r"\(and ssl-cert/ssl-key for REQUIRE X509\): error 1045: "
            r"Access denied for user 'root'@'[^']+' \(using password: YES\); check "
            r"\[syncer\.to\] user and password \(empty ones come from \$MYSQL_USER / "
            r"\$MYSQL_PSWD\)")


@pytest.mark.integration
@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_wrong_password_fails_the_start_in_every_mode(mariadb, tmp_path, exactly_once):
    cfg = load_drainer_config(drainer_toml(tmp_path, mariadb.port, exactly_once=exactly_once),
                              env={})
    with pytest.raises(DownstreamError) as info:  # no Ray needed: nothing started
        Drainer.start(cfg, pumps={"pump-0": object()}, upstream_meta={})
    assert re.fullmatch(refusal(mariadb.port), str(info.value)), str(info.value)
    assert info.value.code == 1045 and SECRET not in str(info.value)
    assert "will retry" not in str(info.value)


@pytest.mark.integration
def test_an_unreachable_downstream_is_retried_for_the_stated_time_then_fails(tmp_path):
    port = closed_port()
    cfg = load_drainer_config(drainer_toml(tmp_path, port), env={})
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    with pytest.raises(UnavailableError) as info:
        check_downstream(TaskSettings.from_config(cfg, upstream_meta={}), wait_s=3.0,
                         sleep=sleep, clock=lambda: now[0])
    assert slept == [1.0, 1.0, 1.0]
    assert str(info.value) == (
        f"cannot start: the downstream 127.0.0.1:{port} did not answer within 3 s (4 "
        f"attempt(s), 1 s apart); last error: connecting to the downstream 127.0.0.1:{port} "
        "as 'root': error 2003: Can't connect to MySQL server on '127.0.0.1' ([Errno 111] "
        "Connection refused); check [syncer.to] host and port and that the server runs, "
        "then start the drainer again")


@pytest.mark.integration
def test_cli_exits_1_on_a_wrong_password_without_exactly_once(mariadb, tmp_path):
    """It used to log 'replication task started ... serving' and run forever."""
    config = drainer_toml(tmp_path, mariadb.port, exactly_once=False)
    proc = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "drainer",
                           "--config", str(config)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"tidb-binlog drainer: DownstreamError: " + refusal(mariadb.port),
                        last), proc.stderr[-3000:]
    assert "replication task started" not in proc.stderr and SECRET not in proc.stderr
    assert "Ray" not in proc.stderr  # it ended before joining any Ray cluster


# -- which Ray cluster -----------------------------------------------------------------------

def test_ray_address_is_chosen_as_ray_init_does_with_auto_only_when_asked():
    from cluster.drainer import choose_ray_address

    assert choose_ray_address("10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379") == \
        ("10.0.0.1:6379", "from --ray-address")
    assert choose_ray_address(None, "10.0.0.2:6379", "10.0.0.3:6379") == \
        ("10.0.0.2:6379", "from $RAY_ADDRESS")
    assert choose_ray_address("", "", "10.0.0.3:6379") == \
        ("10.0.0.3:6379", "the cluster `ray start` recorded on this host")
    # Nothing given and nothing recorded: a local Ray, never "any Ray found on this host".
    assert choose_ray_address(None, None, None) == \
        (None, "no --ray-address, no $RAY_ADDRESS, no `ray start` cluster on this host")
    assert choose_ray_address("auto", None, None) == ("auto", "from --ray-address")


def test_a_ray_cluster_wanting_a_token_is_reported_as_an_auth_problem(monkeypatch):
    import ray

    import cluster.ray_join as ray_join

    def refuse(**kw):
        raise ConnectionError("Failed to connect to GCS: UNAUTHENTICATED: invalid token")

    monkeypatch.setattr(ray_join, "_refused", lambda address: None)  # something listens
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(UnavailableError) as info:
        ray_join._init_ray("10.0.0.9:6379", "from --ray-address", "ns")
    assert str(info.value) == (
        "the Ray cluster at '10.0.0.9:6379' (from --ray-address) refused us: it requires "
        "token authentication; set RAY_AUTH_MODE=token and the cluster's token in "
        "RAY_AUTH_TOKEN (or a file named by RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token), "
        "then start the drainer again")


@pytest.mark.integration
def test_cli_with_a_ray_address_where_nothing_listens_exits_1_at_once(mariadb, tmp_path):
    """It used to hang with Ray's own warnings."""
    config = drainer_toml(tmp_path, mariadb.port, password="")
    port = closed_port()
    proc = subprocess.run([sys.executable, "-m", "tidb_binlog.cli.main", "drainer",
                           "--config", str(config), "--ray-address", f"127.0.0.1:{port}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"tidb-binlog drainer: UnavailableError: cannot join the Ray cluster at "
        f"'127.0.0.1:{port}' (from --ray-address): nothing answers there (Connection "
        "refused); check --ray-address / $RAY_ADDRESS (the cluster's GCS host:port, as "
        "`ray start --head` prints it), or unset both to start a local Ray")
