"""MyDecimal's binary form (MySQL ``decimal2bin``), as TiDB's ``WriteBin``/``FromBin``.

A DECIMAL(p, f) value is stored in ``decimal_bin_size(p, f)`` bytes. With
``intg = p - f``, 9 digits per 4-byte word and ``DIG2BYTES`` for partial words:

1. the leading ``intg % 9`` integer digits, big-endian, in ``DIG2BYTES[intg % 9]`` bytes;
2. ``intg // 9`` words of 9 integer digits (4 bytes big-endian each);
3. ``f // 9`` words of 9 fraction digits;
4. the trailing ``f % 9`` fraction digits (as an integer) in ``DIG2BYTES[f % 9]`` bytes.

A negative value has every byte inverted; finally the top bit of byte 0 is
flipped, so the bytes of values with the same (p, f) sort like the values.

Encoding truncates fraction digits beyond ``f`` (TiDB rounds before encoding) and
fails when the integer part has more than ``p - f`` digits. A value whose
representation has no integer digits and no fraction digits (``Decimal(0)``) is
never negative; ``Decimal("-0.00")`` keeps its sign, as in Go.

``precision_and_frac`` is ``MyDecimal.PrecisionAndFrac`` (used by the datum
encoder when a decimal datum has no column precision): frac = the value's
fraction digits, precision = significant integer digits + frac, at least 1.

Decoding checks every digit group (a word above 999999999, or a partial group
with more digits than it holds, is an error rather than a silently wrong value;
TiDB tolerates one extra digit in the leading group) and returns a
``decimal.Decimal`` with exactly ``f`` fraction digits; ``format_decimal`` prints
it like ``MyDecimal.String()``.
"""

from __future__ import annotations

import decimal

from tidb_binlog.codec.primitives import Malformed
from tidb_binlog.errors import CodecError

__all__ = [
    "MAX_DECIMAL_PRECISION",
    "MAX_DECIMAL_SCALE",
    "DIG2BYTES",
    "decimal_bin_size",
    "precision_and_frac",
    "check_decimal_fits",
    "encode_decimal_bin",
    "decode_decimal_bin",
    "read_decimal_bin",
    "format_decimal",
]

MAX_DECIMAL_PRECISION = 81  # MyDecimal holds 9 words of 9 digits
MAX_DECIMAL_SCALE = 30  # mysql.MaxDecimalScale
DIGITS_PER_WORD = 9
WORD_SIZE = 4
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_WORD_BASE = 10**DIGITS_PER_WORD
_POW10 = tuple(10**i for i in range(DIGITS_PER_WORD + 1))
_BAD_NUMBER = "ErrBadNumber"


def decimal_bin_size(precision: int, frac: int) -> int:
    """Bytes of the binary form of a DECIMAL(precision, frac)."""
    intg = precision - frac
    return (
        (intg // DIGITS_PER_WORD) * WORD_SIZE
        + DIG2BYTES[intg % DIGITS_PER_WORD]
        + (frac // DIGITS_PER_WORD) * WORD_SIZE
        + DIG2BYTES[frac % DIGITS_PER_WORD]
    )


def _parts(value: decimal.Decimal) -> tuple[bool, int, int, int]:
    """(negative, coefficient, exponent, fraction digits) of a finite Decimal."""
    sign, digits, exp = value.as_tuple()
    coeff = 0
    for d in digits:
        coeff = coeff * 10 + d
    return bool(sign), coeff, exp, max(0, -exp)


def _int_and_frac(coeff: int, exp: int, frac: int) -> tuple[int, int]:
    """Integer part and the first ``frac`` fraction digits (truncated) of coeff*10**exp."""
    shift = exp + frac
    scaled = coeff * 10**shift if shift >= 0 else coeff // 10**-shift
    return divmod(scaled, 10**frac)


def precision_and_frac(value: decimal.Decimal) -> tuple[int, int]:
    """``MyDecimal.PrecisionAndFrac``: (significant int digits + frac, frac), precision >= 1."""
    _, coeff, exp, frac = _parts(value)
    int_part = coeff * 10**exp if exp >= 0 else coeff // 10**-exp
    int_digits = len(str(int_part)) if int_part else 0
    return (int_digits + frac) or 1, frac


def _check_shape(precision: int, frac: int) -> None:
    if not (
        1 <= precision <= MAX_DECIMAL_PRECISION
        and 0 <= frac <= MAX_DECIMAL_SCALE
        and frac <= precision
    ):
        raise CodecError(
            f"invalid DECIMAL({precision},{frac}): need 1 <= precision <= "
            f"{MAX_DECIMAL_PRECISION}, 0 <= frac <= {MAX_DECIMAL_SCALE}, frac <= precision"
        )


def check_decimal_fits(value: decimal.Decimal, precision: int, frac: int) -> None:
    """Raise CodecError unless ``value`` is exactly representable in DECIMAL(precision, frac)."""
    _check_shape(precision, frac)
    _, coeff, exp, value_frac = _parts(value)
    if value_frac > frac and coeff % 10 ** (value_frac - frac):
        raise CodecError(
            f"decimal {value} has more than {frac} fractional digits; "
            f"round it to the column scale first"
        )
    int_part, _ = _int_and_frac(coeff, exp, frac)
    if int_part >= 10 ** (precision - frac):
        raise CodecError(
            f"decimal {value} does not fit DECIMAL({precision},{frac}): "
            f"at most {precision - frac} integer digits"
        )


def encode_decimal_bin(value: decimal.Decimal, precision: int, frac: int) -> bytes:
    """The binary form of ``value`` as DECIMAL(precision, frac) (``MyDecimal.WriteBin``)."""
    if not isinstance(value, decimal.Decimal) or not value.is_finite():
        raise CodecError(f"cannot encode {value!r} as a DECIMAL: need a finite decimal.Decimal")
    _check_shape(precision, frac)
    negative, coeff, exp, value_frac = _parts(value)
    int_part, frac_part = _int_and_frac(coeff, exp, frac)
    intg = precision - frac
    if int_part >= 10**intg:
        raise CodecError(
            f"decimal {value} overflows DECIMAL({precision},{frac}): at most {intg} integer digits"
        )
    whole_int = coeff * 10**exp if exp >= 0 else coeff // 10**-exp
    if negative and whole_int == 0 and value_frac == 0:
        negative = False  # Go: no digits at all -> mask 0
    out = bytearray()
    lead = intg % DIGITS_PER_WORD
    words_int = intg // DIGITS_PER_WORD
    if lead:
        out += (int_part // _WORD_BASE**words_int).to_bytes(DIG2BYTES[lead], "big")
    for i in range(words_int - 1, -1, -1):
        out += (int_part // _WORD_BASE**i % _WORD_BASE).to_bytes(WORD_SIZE, "big")
    words_frac = frac // DIGITS_PER_WORD
    trail = frac % DIGITS_PER_WORD
    for i in range(words_frac):
        shift = frac - DIGITS_PER_WORD * (i + 1)
        out += (frac_part // 10**shift % _WORD_BASE).to_bytes(WORD_SIZE, "big")
    if trail:
        out += (frac_part % _POW10[trail]).to_bytes(DIG2BYTES[trail], "big")
    if negative:
        for i in range(len(out)):
            out[i] ^= 0xFF
    out[0] ^= 0x80
    return bytes(out)


def read_decimal_bin(
    buf: bytes, off: int, precision: int, frac: int
) -> tuple[decimal.Decimal, int]:
    """Decode the binary form at ``off``; raises Malformed on bad shape or digits."""
    if not (
        1 <= precision <= MAX_DECIMAL_PRECISION
        and 0 <= frac <= MAX_DECIMAL_SCALE
        and frac <= precision
    ):
        raise Malformed(f"invalid DECIMAL({precision},{frac}) header")
    size = decimal_bin_size(precision, frac)
    end = off + size
    if end > len(buf):
        raise Malformed(f"DECIMAL({precision},{frac}) needs {size} bytes, {len(buf) - off} remain")
    raw = bytearray(buf[off:end])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        for i in range(size):
            raw[i] ^= 0xFF
    intg = precision - frac
    lead = intg % DIGITS_PER_WORD
    pos = 0
    int_part = 0
    if lead:
        n = DIG2BYTES[lead]
        x = int.from_bytes(raw[pos : pos + n], "big")
        if x >= _POW10[lead]:
            raise Malformed(f"leading integer group {x} has more than {lead} digits")
        int_part = x
        pos += n
    for _ in range(intg // DIGITS_PER_WORD):
        x = int.from_bytes(raw[pos : pos + WORD_SIZE], "big")
        if x >= _WORD_BASE:
            raise Malformed(f"integer word {x} exceeds 999999999")
        int_part = int_part * _WORD_BASE + x
        pos += WORD_SIZE
    frac_part = 0
    for _ in range(frac // DIGITS_PER_WORD):
        x = int.from_bytes(raw[pos : pos + WORD_SIZE], "big")
        if x >= _WORD_BASE:
            raise Malformed(f"fraction word {x} exceeds 999999999")
        frac_part = frac_part * _WORD_BASE + x
        pos += WORD_SIZE
    trail = frac % DIGITS_PER_WORD
    if trail:
        n = DIG2BYTES[trail]
        x = int.from_bytes(raw[pos : pos + n], "big")
        if x >= _POW10[trail]:
            raise Malformed(f"trailing fraction group {x} has more than {trail} digits")
        frac_part = frac_part * _POW10[trail] + x
    if negative and frac == 0 and int_part == 0:
        negative = False  # Go: no digits at all -> the zero MyDecimal
    digits = tuple(int(c) for c in str(int_part * 10**frac + frac_part))
    return decimal.Decimal((1 if negative else 0, digits, -frac)), end


def decode_decimal_bin(buf: bytes, precision: int, frac: int) -> decimal.Decimal:
    """Decode MyDecimal's binary form of a DECIMAL(precision, frac) at the start of ``buf``."""
    try:
        return read_decimal_bin(bytes(buf), 0, precision, frac)[0]
    except Malformed as err:
        raise CodecError(
            f"bad DECIMAL({precision},{frac}) binary at offset 0: {err} ({_BAD_NUMBER})",
            offset=0,
        ) from err


def format_decimal(value: decimal.Decimal, frac: int) -> str:
    """``MyDecimal.String()`` of a decoded value: exactly ``frac`` fraction digits."""
    return f"{value:.{frac}f}" if frac > 0 else f"{value:.0f}"
