"""Passwords encrypted the way TiDB Binlog's ``binlogctl -cmd encrypt`` does.

A drainer.toml may carry ``encrypted_password`` instead of ``password`` so the
plain password is not in the file. The value must be interchangeable with
TiDB Binlog's: a value produced by TiDB's binlogctl decrypts here and the other
way round, given the same key. The format (TiDB Binlog ``pkg/encrypt``):

    base64( IV (16 bytes) ‖ "@" ‖ AES-CFB(key, IV, plaintext) )

- AES in CFB mode with full 128-bit segments (Go's ``cipher.NewCFBEncrypter``),
  a random IV per value; the ``@`` separator lets a wrong value be told apart
  from a wrong key only partly: a wrong key still "decrypts" to garbage, which
  the downstream then refuses as a wrong password.
- Key: ``$BINLOG_SECRET_KEY`` as hex, 16, 24 or 32 bytes (AES-128/192/256);
  when unset, TiDB Binlog's built-in default key (:data:`DEFAULT_SECRET_KEY_HEX`),
  which is public: it only keeps a password from being read off the file at a
  glance. Set ``BINLOG_SECRET_KEY`` on both the machine that encrypts and every
  drainer host for real protection.

Nothing here logs or echoes the plaintext; errors name the problem, never the
value.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping

from tidb_binlog.errors import ConfigError, InvalidArgument

__all__ = ["SECRET_KEY_ENV", "DEFAULT_SECRET_KEY_HEX", "secret_key", "encrypt", "decrypt"]

SECRET_KEY_ENV = "BINLOG_SECRET_KEY"
# TiDB Binlog's default key (pkg/encrypt): the same bytes, so values interoperate.
DEFAULT_SECRET_KEY_HEX = "a529b7665997f043a30ac8fadcb51d6aa032c226ab5b7750530b12b8c1a16a48"
_SEPARATOR = b"@"
_BLOCK = 16


def secret_key(env: Mapping[str, str] | None = None) -> bytes:
    """The AES key: ``$BINLOG_SECRET_KEY`` (hex) or the default; ConfigError if malformed."""
    env = os.environ if env is None else env
    hex_key = env.get(SECRET_KEY_ENV, "")
    if not hex_key:
        return bytes.fromhex(DEFAULT_SECRET_KEY_HEX)
    try:
        key = bytes.fromhex(hex_key)
    except ValueError:
        raise ConfigError(f"${SECRET_KEY_ENV} is not a hex string; set it to 32, 48 or 64 "
                          "hex digits (a 16, 24 or 32 byte AES key)", key=SECRET_KEY_ENV) from None
    if len(key) not in (16, 24, 32):
        raise ConfigError(f"${SECRET_KEY_ENV} holds {len(key)} bytes; an AES key has 16, 24 "
                          "or 32 bytes (32, 48 or 64 hex digits)", key=SECRET_KEY_ENV)
    return key


def _cipher(key: bytes, iv: bytes):
    try:  # an optional dependency: only encrypted passwords need it (ConfigError if missing)
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
    except ImportError as exc:  # pragma: no cover - installed with ray[default]
        raise ConfigError("encrypted passwords need the `cryptography` package; "
                          "pip install cryptography") from exc
    try:  # CFB moved to the "decrepit" module in cryptography 47 (same cipher)
        from cryptography.hazmat.decrepit.ciphers.modes import CFB
    except ImportError:  # pragma: no cover - older cryptography
        from cryptography.hazmat.primitives.ciphers.modes import CFB
    return Cipher(algorithms.AES(key), CFB(iv))


def encrypt(plaintext: str, *, key: bytes | None = None, iv: bytes | None = None) -> str:
    """``plaintext`` encrypted and base64-encoded (binlogctl ``-cmd encrypt -text``).

    ``iv`` is for tests only (fixed vectors); by default a fresh random one.
    """
    key = secret_key() if key is None else key
    iv = os.urandom(_BLOCK) if iv is None else iv
    if len(iv) != _BLOCK:
        raise InvalidArgument(f"the IV has {_BLOCK} bytes, got {len(iv)}")
    enc = _cipher(key, iv).encryptor()
    body = enc.update(plaintext.encode()) + enc.finalize()
    return base64.b64encode(iv + _SEPARATOR + body).decode("ascii")


def decrypt(ciphertext_b64: str, *, key: bytes | None = None, where: str = "") -> str:
    """The plaintext of a value :func:`encrypt` (or TiDB's binlogctl) made.

    ConfigError names ``where`` (e.g. the config key) and what is wrong, never the value.
    """
    at = f"{where}: " if where else ""
    hint = ("encrypt the password again with `tidb-binlog binlogctl -cmd encrypt -text ...` "
            f"using the same ${SECRET_KEY_ENV} as this process")
    try:
        raw = base64.b64decode(ciphertext_b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{at}the encrypted password is not valid base64; {hint}",
                          key=where or None) from None
    if len(raw) < _BLOCK + len(_SEPARATOR) or raw[_BLOCK:_BLOCK + 1] != _SEPARATOR:
        raise ConfigError(f"{at}the encrypted password is not in TiDB Binlog's format "
                          f"(16-byte IV, '@', ciphertext); {hint}", key=where or None)
    key = secret_key() if key is None else key
    dec = _cipher(key, raw[:_BLOCK]).decryptor()
    plain = dec.update(raw[_BLOCK + 1:]) + dec.finalize()
    try:
        return plain.decode()
    except UnicodeDecodeError:
        # A wrong key gives random bytes: say so rather than hand garbage to MySQL.
        raise ConfigError(f"{at}the encrypted password does not decrypt to text: it was "
                          f"made with another key; {hint}", key=where or None) from None
