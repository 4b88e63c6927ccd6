"""A drainer refused by a Ray cluster with token authentication: Ray 2.60's driver raises
only "Failed to connect to Ray cluster at ..." (the Unauthenticated refusal is in Ray's
C++ log lines, seen against a `ray start --head` with RAY_AUTH_MODE=token), so a failed
join of a process without a token says what to set."""

from __future__ import annotations

import pytest

from tidb_binlog.errors import UnavailableError


def test_the_hint_appears_only_without_any_token(tmp_path):
    from cluster.ray_join import token_hint

    hint = token_hint({}, home=str(tmp_path))
    assert "set RAY_AUTH_MODE=token" in hint and "RAY_AUTH_TOKEN" in hint
    assert token_hint({"RAY_AUTH_TOKEN": "abc"}, home=str(tmp_path)) == ""
    assert token_hint({"RAY_AUTH_MODE": "token"}, home=str(tmp_path)) == ""
    assert token_hint({"RAY_AUTH_TOKEN_PATH": "/t"}, home=str(tmp_path)) == ""
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("abc")
    assert token_hint({}, home=str(tmp_path)) == ""


def test_a_refused_join_without_a_token_names_the_token(monkeypatch, tmp_path):
    import ray

    import cluster.ray_join as ray_join

    def refuse(**kw):  # what ray.init raised when the GCS answered InvalidAuthToken
        raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379")

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(ray_join, "_refused", lambda address: None)  # something listens
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(UnavailableError) as info:
        ray_join._init_ray("127.0.0.1:6379", "from --ray-address", "ns")
    text = str(info.value)
    assert "Failed to connect to Ray cluster" in text
    assert "if the cluster uses token authentication, set RAY_AUTH_MODE=token" in text
