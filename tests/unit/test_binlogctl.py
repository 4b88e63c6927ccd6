"""binlogctl's pure parts: flags (one or two dashes), lag, tables, commands over an
in-memory registry (HTTP actions through a recording fake), generate_meta, and
TiDB Binlog's encrypted_password format (checked against NIST's AES-CFB128 vector)."""

from __future__ import annotations

import argparse
import base64
import io

import pytest

from tidb_binlog.binlogctl import report
from tidb_binlog.binlogctl.commands import Binlogctl, Options, savepoint_text
from tidb_binlog.binlogctl.encrypt import (
    DEFAULT_SECRET_KEY_HEX,
    SECRET_KEY_ENV,
    decrypt,
    encrypt,
    secret_key,
)
from tidb_binlog.binlogctl.flags import add_arguments, options_from_args
from tidb_binlog.config import load_drainer_config
from tidb_binlog.drainer.checkpoint.checkpoint import decode_savepoint
from tidb_binlog.errors import ConfigError, StateError, UnavailableError
from tidb_binlog.node import DRAINER, OFFLINE, ONLINE, PAUSED, PUMP, NodeStatus
from tidb_binlog.testing.registry import InMemoryRegistry
from tidb_binlog.tso import compose, extract_physical

# NIST SP 800-38A F.3.17 (CFB128-AES256.Encrypt), first block.
NIST_KEY = bytes.fromhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
NIST_IV = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
NIST_PLAIN = bytes.fromhex("6bc1bee22e409f96e93d7e117393172a")
NIST_CIPHER = bytes.fromhex("dc7e84bfda79164b7ecd8486985d3860")


def parse(*argv: str) -> Options:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return options_from_args(p.parse_args(list(argv)))


# -- flags ----------------------------------------------------------------------------
def test_tidb_single_dash_flags_and_double_dash_are_the_same():
    a = parse("-cmd", "update-pump", "-node-id", "p1", "-state", "paused")
    b = parse("--cmd=update-pump", "--node-id", "p1", "--state=paused")
    assert a == b == Options(cmd="update-pump", node_id="p1", state="paused")
    assert parse("-cmd=drainers", "-show-offline-nodes").show_offline_nodes is True
    assert parse().cmd == "pumps" and parse().data_dir == "binlog_position"
    assert parse("-cmd", "offline-pump", "-node-id", "p", "--wait", "30").wait_s == 30.0


def test_unknown_command_is_refused_naming_the_choices():
    ctl = Binlogctl(lambda: pytest.fail("no registry needed"))
    with pytest.raises(ConfigError, match="unknown; expected one of pumps, drainers"):
        ctl.run(Options(cmd="remove-pump"))


# -- lag and tables --------------------------------------------------------------------
BASE_MS = 1_700_000_000_000


def ts(seconds: float) -> int:
    return compose(BASE_MS + int(seconds * 1000), 0)


def test_pump_lag_only_for_online_pumps():
    now = ts(100)
    assert report.pump_lag_s(NodeStatus("p", "h:1", ONLINE, max_commit_ts=ts(97.5)), now) == 2.5
    assert report.pump_lag_s(NodeStatus("p", "h:1", PAUSED, max_commit_ts=ts(10)), now) is None
    # a position taken a moment after the TSO read is not a negative lag
    assert report.pump_lag_s(NodeStatus("p", "h:1", ONLINE, max_commit_ts=ts(101)), now) == 0.0


def test_drainer_lag_against_tso_and_each_non_offline_pump():
    pumps = [NodeStatus("p0", "h:1", ONLINE, max_commit_ts=ts(99)),
             NodeStatus("p1", "h:2", PAUSED, max_commit_ts=ts(50)),
             NodeStatus("p2", "h:3", OFFLINE, max_commit_ts=ts(99))]
    lag = report.drainer_lag(NodeStatus("d", "h:9", ONLINE, max_commit_ts=ts(60)), ts(100), pumps)
    assert lag.behind_tso_s == 40.0
    assert lag.behind_pumps_s == {"p0": 39.0, "p1": 0.0}
    off = report.drainer_lag(NodeStatus("d", "h:9", OFFLINE, max_commit_ts=ts(1)), ts(100), pumps)
    assert off.behind_tso_s is None and off.behind_pumps_s == {}


def test_tables_hide_offline_nodes_unless_asked_and_mark_dead_ones():
    pumps = [NodeStatus("p0", "10.0.0.1:8250", ONLINE, max_commit_ts=ts(98), update_ts=ts(99)),
             NodeStatus("p1", "10.0.0.2:8250", OFFLINE, max_commit_ts=ts(5), update_ts=ts(5))]
    header, rows = report.pump_rows(pumps, ts(100))
    assert header[:5] == ["NodeID", "Address", "State", "MaxCommitTS", "UpdateTime"]
    assert [r[0] for r in rows] == ["p0"] and rows[0][5] == "2.0"
    assert rows[0][4] == "2023-11-14 22:14:59 UTC"
    _, rows = report.pump_rows(pumps, ts(100), show_offline=True)
    assert [r[0] for r in rows] == ["p0", "p1"] and rows[1][5] == "-"
    dead = NodeStatus("d", "h:1", ONLINE, is_alive=False, max_commit_ts=ts(90))
    _, rows = report.drainer_rows([dead], pumps, ts(100))
    assert rows[0][2] == "online (not alive)" and rows[0][5] == "10.0" and rows[0][6] == "p0 8.0"
    text = report.render_table(header, report.pump_rows(pumps, ts(100))[1])
    assert text.splitlines()[0].split() == header
    assert "no nodes" in report.render_table(header, [])


def test_the_pump_table_shows_a_tripped_disk_guard():
    guard = ("no available space: 1.0 GiB free on /data is below stop-write-at-available-space "
             "(2.0 GiB); refusing Prewrites")
    pumps = [NodeStatus("p0", "10.0.0.1:8250", ONLINE, max_commit_ts=ts(98), err_msg=guard),
             NodeStatus("p1", "10.0.0.2:8250", ONLINE, max_commit_ts=ts(98))]
    header, rows = report.pump_rows(pumps, ts(100))
    assert header[-1] == "ErrMsg"
    assert rows[0][-1] == guard and rows[1][-1] == "-"


# -- commands over a registry ----------------------------------------------------------
class FakePut:
    """Records PUTs; answers like a pump (or raises the given OSError)."""

    def __init__(self, code=200, body='{"message":"apply action pause success!","code":200}',
                 error: OSError | None = None):
        self.code, self.body, self.error, self.urls = code, body, error, []

    def __call__(self, url, timeout_s, ssl_context):
        self.urls.append(url)
        if self.error is not None:
            raise self.error
        return self.code, self.body


def ctl_with(reg, put=None, **kw):
    out, err = io.StringIO(), io.StringIO()
    ctl = Binlogctl(lambda: reg, out=out, err=err, put=put or FakePut(), **kw)
    return ctl, out, err


def registry_with_nodes():
    reg = InMemoryRegistry()
    reg.update_node(PUMP, NodeStatus("pump-0", "127.0.0.1:8250", ONLINE,
                                     max_commit_ts=reg.get_ts()))
    reg.update_node(PUMP, NodeStatus("pump-old", "127.0.0.1:9250", OFFLINE))
    reg.update_node(DRAINER, NodeStatus("drainer-0", "127.0.0.1:8249", ONLINE, max_commit_ts=1))
    return reg


def test_pumps_and_drainers_tables_from_the_registry():
    reg = registry_with_nodes()
    ctl, out, _ = ctl_with(reg)
    assert ctl.run(Options(cmd="pumps")) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:5] == ["NodeID", "Address", "State", "MaxCommitTS", "UpdateTime"]
    assert [line.split()[0] for line in lines[1:]] == ["pump-0"]
    ctl.run(Options(cmd="pumps", show_offline_nodes=True))
    assert "pump-old" in out.getvalue()
    ctl.run(Options(cmd="drainers"))
    drainer_line = out.getvalue().splitlines()[-1]
    assert drainer_line.startswith("drainer-0") and "pump-0" in drainer_line


def test_update_state_forces_any_state_and_checks_its_input():
    reg = registry_with_nodes()
    ctl, out, err = ctl_with(reg)
    # offline -> paused is not a transition a node makes; an operator may force it
    assert ctl.run(Options(cmd="update-pump", node_id="pump-old", state=PAUSED)) == 0
    assert reg.node(PUMP, "pump-old").state == PAUSED and err.getvalue() == ""
    ctl.run(Options(cmd="update-drainer", node_id="drainer-0", state=OFFLINE))
    assert reg.node(DRAINER, "drainer-0").state == OFFLINE
    assert "is alive" in err.getvalue()      # a running node writes its own state back
    with pytest.raises(ConfigError, match="'gone' is illegal"):
        ctl.run(Options(cmd="update-pump", node_id="pump-0", state="gone"))
    with pytest.raises(ConfigError, match=r"no pump with node id 'nope'.*known: pump-0, pump-old"):
        ctl.run(Options(cmd="update-pump", node_id="nope", state=ONLINE))
    with pytest.raises(ConfigError, match="needs -node-id"):
        ctl.run(Options(cmd="update-pump", state=ONLINE))


def test_actions_go_to_the_nodes_http_port_plus_one():
    reg = registry_with_nodes()
    put = FakePut()
    ctl, out, _ = ctl_with(reg, put)
    assert ctl.run(Options(cmd="pause-pump", node_id="pump-0")) == 0
    assert put.urls == ["http://127.0.0.1:8251/state/pump-0/pause"]
    assert "apply action pause success!" in out.getvalue()
    ctl.run(Options(cmd="offline-drainer", node_id="drainer-0", status_addr="10.1.1.1:9000"))
    assert put.urls[-1] == "http://10.1.1.1:9000/state/drainer-0/close"


def test_a_refused_action_says_why():
    reg = registry_with_nodes()
    put = FakePut(400, '{"message":"cannot pause a pump in state paused","code":400}')
    ctl, _, _ = ctl_with(reg, put)
    with pytest.raises(StateError, match=r"refused pause \(HTTP 400\): cannot pause a pump"):
        ctl.run(Options(cmd="pause-pump", node_id="pump-0"))


def test_an_unreachable_node_names_the_url_and_the_way_out():
    reg = registry_with_nodes()
    ctl, _, _ = ctl_with(reg, FakePut(error=ConnectionRefusedError(111, "refused")))
    with pytest.raises(UnavailableError) as info:
        ctl.run(Options(cmd="offline-drainer", node_id="drainer-0"))
    message = str(info.value)
    assert "http://127.0.0.1:8250/state/drainer-0/close" in message
    assert "-cmd update-drainer -node-id drainer-0 -state offline" in message
    assert "pump GC" in message


def test_wait_until_the_record_reaches_the_final_state():
    reg = registry_with_nodes()

    class Clock:
        now = 0.0

    def sleep(s):
        Clock.now += s
        if Clock.now > 0.5:  # the pump finishes pausing
            reg.update_node(PUMP, reg.node(PUMP, "pump-0").copy(state=PAUSED))

    ctl, out, _ = ctl_with(reg, clock=lambda: Clock.now, sleep=sleep)
    ctl.run(Options(cmd="pause-pump", node_id="pump-0", wait_s=5))
    assert out.getvalue().rstrip().endswith("pump pump-0 is paused")
    with pytest.raises(UnavailableError, match="still paused after 1 s .waiting for offline"):
        ctl.run(Options(cmd="offline-pump", node_id="pump-0", wait_s=1))


def test_generate_meta_writes_a_savepoint_our_drainer_reads(tmp_path):
    reg = registry_with_nodes()
    ctl, out, _ = ctl_with(reg)
    before = reg.get_ts()
    ctl.run(Options(cmd="generate_meta", data_dir=str(tmp_path / "meta"),
                    time_zone="Asia/Shanghai"))
    text = (tmp_path / "meta" / "savepoint").read_text()
    cp = decode_savepoint(text)
    assert cp.commit_ts > before
    assert "UTC" in text and ("CST" in text or "+08" in text)
    assert savepoint_text(5) == "commitTS = 5\n"
    with pytest.raises(ConfigError, match="not a known time zone"):
        savepoint_text(5, "Mars/Olympus")


def test_encrypt_command_needs_text_and_no_registry():
    out = io.StringIO()
    ctl = Binlogctl(lambda: pytest.fail("encrypt must not join Ray"), out=out)
    ctl.run(Options(cmd="encrypt", text="s3cret"))
    assert decrypt(out.getvalue().strip()) == "s3cret"
    with pytest.raises(ConfigError, match="needs -text"):
        ctl.run(Options(cmd="encrypt"))


# -- encrypted_password ----------------------------------------------------------------
def test_encrypt_is_aes_cfb128_with_iv_at_sign_ciphertext_in_base64():
    # CFB's first block is plaintext XOR AES_k(IV): the NIST vector gives AES_k(IV), so
    # any text of up to 16 bytes has a known ciphertext under that key and IV.
    keystream = bytes(a ^ b for a, b in zip(NIST_PLAIN, NIST_CIPHER, strict=True))
    text = "p@ssw0rd-123"
    raw = base64.b64decode(encrypt(text, key=NIST_KEY, iv=NIST_IV))
    assert raw[:16] == NIST_IV and raw[16:17] == b"@"
    assert raw[17:] == bytes(c ^ k for c, k in zip(text.encode(), keystream, strict=False))
    assert decrypt(base64.b64encode(raw).decode(), key=NIST_KEY) == text


def test_key_from_env_or_tidbs_default():
    assert secret_key({}) == bytes.fromhex(DEFAULT_SECRET_KEY_HEX)
    assert secret_key({SECRET_KEY_ENV: "00" * 16}) == bytes(16)
    with pytest.raises(ConfigError, match="not a hex string"):
        secret_key({SECRET_KEY_ENV: "xyz"})
    with pytest.raises(ConfigError, match="holds 5 bytes"):
        secret_key({SECRET_KEY_ENV: "00" * 5})
    value = encrypt("pw")
    assert decrypt(value) == "pw" and encrypt("pw") != value   # fresh IV each time


@pytest.mark.parametrize("value, message", [
    ("not base64!", "not valid base64"),
    (base64.b64encode(b"short").decode(), "not in TiDB Binlog's format"),
    (base64.b64encode(bytes(16) + b"#abc").decode(), "not in TiDB Binlog's format"),
])
def test_malformed_values_are_refused_without_echoing_them(value, message):
    with pytest.raises(ConfigError, match=message) as info:
        decrypt(value, where="syncer.to.encrypted_password")
    assert value not in str(info.value)


def test_a_value_made_with_another_key_is_refused():
    value = encrypt("a longer password with text", key=bytes(32), iv=NIST_IV)
    with pytest.raises(ConfigError, match="made with another key"):
        decrypt(value, key=NIST_KEY)


def test_drainer_config_decrypts_encrypted_password(tmp_path):
    key_hex = "11" * 32
    env = {SECRET_KEY_ENV: key_hex}
    to_pw = encrypt("down-pw", key=bytes.fromhex(key_hex))
    cp_pw = encrypt("cp-pw", key=bytes.fromhex(key_hex))
    path = tmp_path / "drainer.toml"
    path.write_text(f'[syncer.to]\npassword = "ignored"\nencrypted_password = "{to_pw}"\n'
                    f'[syncer.to.checkpoint]\nencrypted_password = "{cp_pw}"\n')
    cfg = load_drainer_config(path, env=env)
    assert cfg.syncer.to.password == "down-pw"              # encrypted wins, as in TiDB
    assert cfg.syncer.to.checkpoint.password == "cp-pw"
    assert "down-pw" not in repr(cfg)
    # without the checkpoint's own, it inherits the downstream's decrypted password
    path.write_text(f'[syncer.to]\nencrypted_password = "{to_pw}"\n')
    assert load_drainer_config(path, env=env).syncer.to.checkpoint.password == "down-pw"
    # TiDB's format has no MAC: a wrong key is seen only when the bytes are not UTF-8, which
    # a 7-byte password passes about once in 128 tries; 48 random bytes never do.
    long_pw = encrypt("p" * 48, key=bytes.fromhex(key_hex))
    path.write_text(f'[syncer.to]\nencrypted_password = "{long_pw}"\n')
    with pytest.raises(ConfigError, match="made with another key") as info:
        load_drainer_config(path, env={})
    assert info.value.key == "syncer.to.encrypted_password" and str(path) in str(info.value)


def test_report_times_use_the_physical_part():
    assert report.format_ts_time(0) == "-"
    assert extract_physical(ts(0)) == BASE_MS
