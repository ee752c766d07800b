"""Secrets: what in a trace is a secret, and scrubbing it before anything is written or shown.

Profiler traces carry more than timings. Kineto's top-level ``metadata`` can hold a full
environment dump (``HF_TOKEN``, ``WANDB_API_KEY``), Nsight Systems exports hold every environment
variable and the command line of the profiled process. Nothing traceview writes for sharing may
contain them.

Public API
----------
``is_secret_key(key)``
    True when a key *name* says its value is a secret (``HF_TOKEN``, ``apiKey``, ``db-password``).
``looks_secret(value)``
    True when a string *is or contains* a secret by its shape (``hf_...``, ``AKIA...``, a JWT, a
    ``user:password@`` URL, ``TOKEN=...`` assignments, long random strings).
``scrub(obj, *, strict=False)``
    A deep copy of JSON-like data with secret values replaced by ``"<redacted>"``. Structure is
    kept; inside longer strings only the secret part is replaced. Keys are scrubbed like values
    (a token used as a key is output too), numbered when two redacted keys would collide.
``scrub_text(text, *, strict=False)``
    The same for one string (command lines, warnings, log lines).
``ColumnRows(columns, values)``
    The rows of a table held as columns (``values[j]`` is column ``columns[j]``). :func:`scrub`
    turns it into the list of row dicts ``[dict(zip(columns, row)) for row in zip(*values)]``,
    scrubbed as that list would be, but column by column: each key name once, each distinct
    string of a column once, numbers not looked at (a report's tables and chart points).
``scrub_metadata(ranks, *, strict=False) -> dict[int, dict]``
    **Renderers (Markdown / HTML / JSON reports) must call this before echoing any environment or
    metadata**: it returns, per rank, ``RankInfo.to_json()`` with every value scrubbed
    (``raw_metadata``, ``distributed_info``, process and thread names, paths, ...). Never render
    ``RankInfo.raw_metadata`` directly.
``input_dirs(paths)``, ``without_input_dirs(message, dirs)``
    Messages naming the inputs by file name only: their directories can name users and machines.

Rules, by key name (``is_secret_key``)
--------------------------------------
Keys are split into lower-cased words at ``_ - . : / space`` and camelCase boundaries
(``HFToken`` -> ``hf token``; ``sortIndex`` -> ``sort index``), so ``keys``, ``monkey``,
``sort_index`` and ``TOKENIZERS_PARALLELISM`` never match.

* anywhere in the key: ``secret(s)``, ``password``, ``passwd``, ``passphrase``, ``passcode``,
  ``credential(s)``, ``creds``, and the run-together forms ``apikey``, ``privatekey``,
  ``secretkey``, ``accesskey``, ``accesstoken``, ``authtoken``, ``sessionid``,
  ``connectionstring``; the word pairs ``connection string`` / ``conn str``;
* as the last word: ``token``, ``auth``, ``oauth``, ``authorization``, ``cookie(s)``,
  ``session``, ``signature``, ``dsn``, ``webhook``, ``jwt``, ``pat`` (after another word), and
  ``key`` unless qualified as ordinary (``sort_key``, ``cache_key``, ``public_key``,
  ``primary_key``, ...); also ``access_key_id``;
* ``pwd`` after another word (``DB_PWD``); a bare ``PWD`` / ``OLDPWD`` is the shell's working
  directory, not a password.

Last-word rules keep counters and ids (``max_token_count``, ``XDG_SESSION_ID``,
``token_ids``, ``SSH_AUTH_SOCK``) out. A value under a secret key is replaced whole (strings and
numbers; ``true``/``false``/``null`` and empty strings stay, they hide nothing; containers are
scrubbed leaf by leaf so their shape stays).

Rules, by value shape (inside any string)
-----------------------------------------
``hf_token`` (``hf_`` + 30+ alphanumerics), ``github_token`` (``ghp_ gho_ ghu_ ghs_ ghr_`` +
30+, ``github_pat_``), ``aws_access_key_id`` (``AKIA``/``ASIA``/... + 16 upper-case
alphanumerics), ``openai_key`` (``sk-`` + 20+, incl. ``sk-proj-``), ``slack_token``
(``xox[abprs]-``), ``gitlab_token`` (``glpat-``), ``google_api_key`` (``AIza`` + 35),
``npm_token``, ``pypi_token``, ``stripe_key``, ``jwt`` (``eyJ...`` header + two more base64url
parts), ``private_key_block`` (``-----BEGIN ... PRIVATE KEY-----`` to its END line),
``url_password`` (the password of ``scheme://user:password@host``), ``assignment``
(``NAME=value``, ``NAME: value``, ``"NAME": "value"``, ``?name=value&`` where NAME is a secret
key: env dumps, ``HF_TOKEN=... python train.py``), ``cli_flag`` (``--token X``,
``--api-key=X``, and ``["--token", "X"]`` as separate argv elements), ``auth_header``
(``Bearer X``).

``high_entropy`` catches long random strings with no known prefix. A run of the base64/base64url
alphabet is flagged when all of these hold:

* at least 32 characters (padding ``=`` excluded), not starting with ``_Z`` (mangled C++);
* both lower- and upper-case letters: hex digests (``trace_id`` ``D74EA3FA...``, commit SHAs),
  UUIDs and lower-case base32 hashes (Triton ``kernel_hash``) are never flagged by shape alone;
* at most one ``_``/``-`` per 10 characters and at most one ``/`` per 10 (identifiers such as
  ``Cijk_Alik_Bljk_...`` kernel names and paths have many);
* the character class (lower / upper / digit / other) changes between at least 45% of adjacent
  pairs (random strings: ~62%; camelCase identifiers: 30-42%);
* Shannon entropy of at least ``HIGH_ENTROPY_BITS`` = 4.0 bits per character;
* it does not decode (as base64) to printable text, unless that text itself holds a secret:
  base64-encoded configuration such as Lmod's ``_ModuleTable001_`` variables is not a secret,
  random key material (which decodes to random bytes) is.

Measured when this was written: no hit among the ~29,000 distinct strings of the 32 real traces
in ``shared/traces``, and 98-99.5% of random 32-64 character base62/base64/base64url strings
are caught (the rest fall to the separator or class-change limits). Known-prefix tokens and key names
are the primary rules; this one is the safety net.

Strict mode (``strict=True``, ``--strict``) also removes what identifies people and machines:

* ``hostname``: values of host keys (last word ``host``, ``hostname``, ``node``, ``nodename``,
  ``nodelist``, ``addr``, ``ipaddr``, ``ip``, ``address``, ``fqdn``...), FQDNs (labels ending
  in a common or internal TLD: ``.com .io .internal .local .lan .corp``...), ``ip-10-0-0-1``
  style names, this machine's own host name, and every host name learned from those keys
  anywhere else in the same document (e.g. ``uname.node`` equal to ``HOSTNAME``);
* ``ip_address``: IPv4 addresses, except version numbers (under a ``*version*`` key, after
  ``VERSION=`` or ``==``, or followed by ``-N``/``+``);
* ``username``: values of user keys (``user``, ``username``, ``USER_NAME``, ``LOGNAME``...),
  e-mail addresses, names learned from those keys; ``/home/<user>`` alone;
* ``path``: absolute paths are cut to their basename (``/home/alice/train.py(12): step`` ->
  ``train.py(12): step``).

Learned names are only replaced when at least 3 characters long and not generic (``root``,
``ubuntu``, ``localhost``...).

Shareable copies of whole trace files are :mod:`traceview.redact` (a feature built on this module).
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import msgspec

#: a JSON decoder for strings that hold JSON (scrubbed inside, re-encoded)
_ANY = msgspec.json.Decoder()

__all__ = [
    "REDACTED",
    "HIGH_ENTROPY_BITS",
    "ColumnRows",
    "RedactionReport",
    "Scrubber",
    "is_secret_key",
    "is_host_key",
    "is_user_key",
    "is_secret_flag",
    "looks_secret",
    "scrub",
    "scrub_text",
    "scrub_with_report",
    "scrub_metadata",
    "input_dirs",
    "without_input_dirs",
]


REDACTED = "<redacted>"
#: minimum Shannon entropy (bits per character) for the ``high_entropy`` rule
HIGH_ENTROPY_BITS = 4.0
HIGH_ENTROPY_MIN_LENGTH = 32
HIGH_ENTROPY_MIN_CLASS_CHANGES = 0.45


# ------------------------------------------------------------------------------ key names

_ANYWHERE_WORDS = frozenset({
    "secret", "secrets", "password", "passwd", "passphrase", "passcode", "credential", "credentials",
    "creds", "apikey", "privatekey", "secretkey", "accesskey", "accesstoken", "authtoken", "sessionid",
    "connectionstring", "connstr",
})
_LAST_WORDS = frozenset({
    "token", "auth", "oauth", "authorization", "cookie", "cookies", "session", "signature", "dsn",
    "webhook", "jwt",
})
_WORD_PAIRS = (("connection", "string"), ("conn", "str"))
#: ``<qualifier>_key`` that name ordinary keys, not secrets
_ORDINARY_KEY_QUALIFIERS = frozenset({
    "sort", "cache", "primary", "foreign", "partition", "hash", "dict", "map", "lookup", "index",
    "group", "shard", "sharding", "row", "column", "routing", "order", "join", "unique", "composite",
    "hot", "public", "dedup", "stream", "query", "kv", "attention", "dataset", "metric", "event",
    "config", "field", "registry", "state", "param", "module", "layer", "table",
})
_HOST_LAST_WORDS = frozenset({
    "host", "hosts", "hostname", "hostnames", "node", "nodes", "nodename", "nodelist", "fqdn", "addr",
    "ipaddr", "ip", "address", "addresses",
})
_USER_LAST_WORDS = frozenset({"user", "username", "login", "logname"})
_VERSION_WORDS = frozenset({"version", "ver", "versions", "release", "revision"})
_GENERIC_NAMES = frozenset({
    "root", "user", "admin", "ubuntu", "nobody", "guest", "localhost", "none", "null", "unknown", "true",
    "false", "local", "default", "docker", "runner", "main", "master", "worker", "node", "host",
    REDACTED,
})

_CAMEL_1 = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_2 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_NON_WORD = re.compile(r"[^A-Za-z0-9]+")


@functools.lru_cache(maxsize=65536)
def _words(key: str) -> tuple[str, ...]:
    if key.islower():  # no capital letter: no camelCase boundary to find (most keys: ``dur_ns``)
        return tuple(w for w in _NON_WORD.split(key) if w)
    spaced = _CAMEL_2.sub(r"\1 \2", _CAMEL_1.sub(r"\1 \2", key))
    return tuple(w.lower() for w in _NON_WORD.split(spaced) if w)


@functools.lru_cache(maxsize=65536)
def is_secret_key(key: str) -> bool:
    """True when the key name says its value is a secret (see the module docstring for the rules).

    >>> [is_secret_key(k) for k in ("HF_TOKEN", "WANDB_API_KEY", "apiKey", "sort_index", "keys", "monkey")]
    [True, True, True, False, False, False]
    """
    words = _words(str(key))
    if not words:
        return False
    if any(w in _ANYWHERE_WORDS for w in words):
        return True
    for a, b in _WORD_PAIRS:
        if any(words[i] == a and words[i + 1] == b for i in range(len(words) - 1)):
            return True
    last = words[-1]
    if last in _LAST_WORDS:
        return True
    if last == "key":
        return len(words) == 1 or words[-2] not in _ORDINARY_KEY_QUALIFIERS
    if len(words) >= 3 and words[-3:] == ("access", "key", "id"):
        return True
    if last == "pat" and len(words) > 1:
        return True
    if "pwd" in words and len(words) > 1:
        return True
    return False


@functools.lru_cache(maxsize=65536)
def is_host_key(key: str) -> bool:
    words = _words(str(key))
    return bool(words) and words[-1] in _HOST_LAST_WORDS


@functools.lru_cache(maxsize=65536)
def is_user_key(key: str) -> bool:
    words = _words(str(key))
    return bool(words) and (words[-1] in _USER_LAST_WORDS or words[-2:] == ("user", "name"))


@functools.lru_cache(maxsize=65536)
def _is_version_key(key: str) -> bool:
    return any(w in _VERSION_WORDS for w in _words(str(key)))


# ------------------------------------------------------------------------------ value shapes

_SHAPES = re.compile(
    r"(?P<jwt>(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*)"
    r"|(?P<github_token>(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}))"
    r"|(?P<hf_token>(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{30,})"
    r"|(?P<aws_access_key_id>(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)"
    r"[A-Z0-9]{16}(?![A-Za-z0-9]))"
    r"|(?P<openai_key>(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,})"
    r"|(?P<slack_token>(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,})"
    r"|(?P<gitlab_token>(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,})"
    r"|(?P<google_api_key>(?<![A-Za-z0-9])AIza[0-9A-Za-z_-]{35})"
    r"|(?P<npm_token>(?<![A-Za-z0-9])npm_[A-Za-z0-9]{36})"
    r"|(?P<pypi_token>(?<![A-Za-z0-9])pypi-AgE[A-Za-z0-9_-]{50,})"
    r"|(?P<stripe_key>(?<![A-Za-z0-9])[sr]k_(?:live|test)_[A-Za-z0-9]{20,})"
)
#: what every ``_SHAPES`` alternative starts with (its literal prefix, without the lookbehinds): a
#: string without one of these cannot match, and this scan costs a fifth of ``_SHAPES``'s (the
#: lookbehinds keep the regex engine from skipping ahead to a possible first character)
_SHAPE_PREFIXES = re.compile(
    r"eyJ|gh[pousr]_|github_pat_|hf_|A(?:KIA|SIA|BIA|CCA|GPA|IDA|IPA|NPA|NVA|PKA|ROA)|sk-|xox[abprs]-"
    r"|glpat-|AIza|npm_|pypi-AgE|[sr]k_(?:live|test)_"
)
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    re.DOTALL,
)
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s:/?#@'\"<>]*):"
                              r"(?P<password>[^\s/?#@'\"<>]+)@")
_VALUE = r"(?P<val>\"(?:[^\"\\\x00]|\\.)*\"|'[^'\x00]*'|[^\s\x00-\x1f;,&\"'<>(){}\[\]]+)"
_ASSIGNMENT = re.compile(
    r"(?P<q>[\"']?)(?<![A-Za-z0-9_])(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,80})(?P=q)"
    r"(?P<sep>[ \t]*(?:=(?!=)|:(?![:/]))[ \t]*)(?P<scheme>(?:Bearer|Basic|Token|Digest)[ \t]+)?" + _VALUE
)
_FLAG = re.compile(r"(?<![\w-])(?P<flag>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[ \t]+|=)" + _VALUE)
#: package versions (``PyJWT==2.10.1``, ``{"google-auth": "2.40.3"}``) are never secrets
_VERSION_VALUE = re.compile(r"[vV]?\d+(?:\.\d+){1,3}(?:[.+-]?[0-9A-Za-z]{1,12}){0,3}")
_FLAG_ONLY = re.compile(r"--?(?P<name>[A-Za-z][A-Za-z0-9_.-]*)")
_BEARER = re.compile(r"(?i)(?P<scheme>\bbearer[ \t]+)(?P<val>[A-Za-z0-9._~+/=-]{8,})")
_CANDIDATE = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{32,}={0,2}(?![A-Za-z0-9+/=_-])")

# strict
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_TLDS = (
    "com|net|org|io|ai|dev|app|cloud|co|edu|gov|mil|int|info|biz|us|uk|de|fr|jp|cn|kr|ru|nl|eu|ca|au|ch|"
    "se|fi|es|pl|br|tw|sg|hk|local|internal|lan|corp|intra|localdomain|arpa|site|online|tech|xyz"
)
_FQDN = re.compile(
    r"(?<![\w.-])(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+(?:" + _TLDS + r")(?![\w-]|\.[A-Za-z0-9])",
    re.IGNORECASE,
)
_IP_HOST = re.compile(r"(?<![\w-])ip-\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?![\w-])")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(r"(?<![\w.])" + _OCTET + r"(?:\." + _OCTET + r"){3}(?![\w.]|-\d|\+)")
_VERSION_BEFORE = re.compile(r"(?i)(?:(?:version|ver|release)[\"']?[ \t]*[=:][ \t]*[\"']?|==|[vV])$")
_POSIX_PATH = re.compile(r"(?<![\w.~/\\<>-])/[^\s/:;,'\"()\[\]{}<>|=*?]+(?:/[^\s/:;,'\"()\[\]{}<>|=*?]*)*")
_WINDOWS_PATH = re.compile(r"(?<![\w])[A-Za-z]:\\(?:[^\\\s:;,'\"()<>|*?]+\\)*[^\\\s:;,'\"()<>|*?]*")
_HOME_ONLY = re.compile(r"^/(?:home|Users)/[^/]+/?$")
_WINDOWS_HOME_ONLY = re.compile(r"^[A-Za-z]:\\Users\\[^\\]+\\?$", re.IGNORECASE)


def _char_class(c: str) -> int:
    if "a" <= c <= "z":
        return 0
    if "A" <= c <= "Z":
        return 1
    if "0" <= c <= "9":
        return 2
    return 3


def _shannon_bits(text: str) -> float:
    n = len(text)
    return -sum(k / n * math.log2(k / n) for k in Counter(text).values())


_CASE_RUNS = re.compile(r"[A-Z]+|[a-z]+|[0-9]+|[^A-Za-z0-9]+")


def is_identifier_path(token: str) -> bool:
    """A path of CamelCase identifiers (a module path such as
    ``Qwen2Model/Qwen2DecoderLayer/Qwen2RMSNorm``): two or more parts, each starting with a capital,
    letters and digits only, at most one lone small letter, every lone capital followed by small
    letters or digits (random base64 changes case every character or two). Linear: one scan of
    case runs, no backtracking."""
    parts = token.split("/")
    if len(parts) < 2:
        return False
    for part in parts:
        runs = _CASE_RUNS.findall(part)
        if not runs or not runs[0][0].isupper() or not all(run.isalnum() for run in runs):
            return False
        # one lone small letter is a name's (``SiLU``, ``ReLU``); random text has several
        if sum(run.islower() and len(run) == 1 for run in runs) > 1:
            return False
        for i, run in enumerate(runs):  # a lone capital starts a word or precedes a number (``T5Block``)
            after = runs[i + 1] if i + 1 < len(runs) else ""
            if run.isupper() and len(run) == 1 and not (after.islower() or after.isdigit()):
                return False
    return True


def _random_looking(token: str) -> bool:
    """The ``high_entropy`` test (module docstring) for one candidate run of base64 characters."""
    t = token.rstrip("=")
    n = len(t)
    if n < HIGH_ENTROPY_MIN_LENGTH or t.startswith("_Z") or is_identifier_path(t):
        return False
    if (t.count("_") + t.count("-")) * 10 > n or t.count("/") * 10 > n:
        return False
    if not (any("a" <= c <= "z" for c in t) and any("A" <= c <= "Z" for c in t)):
        return False
    classes = [_char_class(c) for c in t]
    changes = sum(a != b for a, b in zip(classes, classes[1:]))
    if changes < HIGH_ENTROPY_MIN_CLASS_CHANGES * (n - 1):
        return False
    return _shannon_bits(t) >= HIGH_ENTROPY_BITS


def _encoded_text(token: str) -> str | None:
    """The text a base64/base64url token encodes, when it decodes to printable text (e.g. Lmod's
    ``_ModuleTable001_`` environment variables); None for random bytes or invalid base64."""
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < 16:
        return None
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in raw)
    if printable < 0.95 * len(raw):
        return None
    return raw.decode("ascii", errors="replace")


def _high_entropy_secret(token: str) -> bool:
    """``_random_looking``, except base64 of ordinary text: that is a secret only when the text
    it encodes holds one."""
    if not _random_looking(token):
        return False
    decoded = _encoded_text(token)
    return decoded is None or looks_secret(decoded)


@functools.lru_cache(maxsize=1)
def _machine_names() -> tuple[str, ...]:
    """This machine's host name (and its first label), when specific enough to replace safely."""
    try:
        name = socket.gethostname()
    except OSError:
        return ()
    names = {name, name.split(".")[0]}
    return tuple(sorted(n for n in names if len(n) >= 3 and n.lower() not in _GENERIC_NAMES))


# ------------------------------------------------------------------------------ report


@dataclass
class RedactionReport:
    """What a redaction replaced: counts by rule, and where (key paths, never values)."""

    #: (where, rule) -> number of replacements; ``where`` is a key path such as
    #: ``metadata.system.env.HF_TOKEN`` or ``META_DATA_CAPTURE[PROCESS_0:ENVIRONMENT_VARIABLE] HF_TOKEN=``
    hits: Counter = field(default_factory=Counter)
    input_format: str = ""

    @property
    def counts(self) -> dict[str, int]:
        """Replacements by rule, most frequent first."""
        out: Counter = Counter()
        for (_, rule), n in self.hits.items():
            out[rule] += n
        return dict(out.most_common())

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    def locations(self) -> dict[str, dict[str, int]]:
        """where -> {rule: count}, sorted by where."""
        out: dict[str, dict[str, int]] = {}
        for (where, rule), n in sorted(self.hits.items()):
            out.setdefault(where, {})[rule] = n
        return out

    def summary(self) -> str:
        if not self.total:
            return "nothing to redact"
        rules = ", ".join(f"{rule} {n:,}" for rule, n in self.counts.items())
        places = len({where for where, _ in self.hits})
        values = f"{self.total:,} value{'s' if self.total != 1 else ''}"
        return f"{values} replaced in {places:,} place{'s' if places != 1 else ''} ({rules})"

    def to_json(self) -> dict[str, Any]:
        return {"input_format": self.input_format, "total": self.total, "counts": self.counts,
                "locations": self.locations()}


# ------------------------------------------------------------------------------ scrubbing

#: the types a scrub returns as they are, unless under a secret key
_PLAIN_SCALARS = frozenset({int, float, bool, type(None)})


class ColumnRows:
    """Table rows held as columns: ``values[j]`` holds column ``columns[j]`` (one cell per row,
    every column as long). What it stands for is :meth:`rows`; :func:`scrub` gives the scrubbed
    list of row dicts, working column by column (see :meth:`Scrubber.column_rows`)."""

    __slots__ = ("columns", "values")

    def __init__(self, columns: list[Any], values: list[list[Any]]) -> None:
        self.columns = columns
        self.values = values

    def __len__(self) -> int:
        # as many rows as zip() gives: none without columns
        return min((len(v) for v in self.values), default=0)

    def rows(self) -> list[dict[Any, Any]]:
        """The row dicts (a repeated column name keeps its first place and its last column's value)."""
        return [dict(zip(self.columns, row)) for row in zip(*self.values)]


class Scrubber:
    """Applies the rules and records every replacement as (where, rule)."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.report = RedactionReport()
        self._log: list[tuple[str, str]] | None = None  # set while memoising a computation
        self._memo: dict[tuple[str, str], tuple[str, tuple[tuple[str, str], ...]]] = {}
        self.learned_hosts: set[str] = set(_machine_names()) if strict else set()
        self.learned_users: set[str] = set()
        self._learned_re: re.Pattern[str] | None = None
        self._learned_dirty = True

    # -- bookkeeping ---------------------------------------------------------------
    def hit(self, where: str, rule: str) -> None:
        self.report.hits[(where, rule)] += 1
        if self._log is not None:
            self._log.append((where, rule))

    def capture(self, fn: Any, *args: Any) -> tuple[Any, tuple[tuple[str, str], ...]]:
        """Run ``fn(*args)``; return its result and the hits it recorded (also kept in the report)."""
        outer, self._log = self._log, []
        try:
            result = fn(*args)
            hits = tuple(self._log)
        finally:
            self._log = outer
        if outer is not None:
            outer.extend(hits)
        return result, hits

    def replay(self, hits: tuple[tuple[str, str], ...]) -> None:
        for h in hits:
            self.hit(*h)

    def text_cached(self, text: str, where: str, key: str = "") -> str:
        """:meth:`text` memoised on (text, key); replays the hits on a cache hit. The result does not
        depend on ``where`` (it only labels hits), so one name met in many places of a report (a
        1 MB kernel name in every table) is scanned once: hits are kept relative to ``where``."""
        memo_key = (text, key)
        found = self._memo.get(memo_key)
        if found is not None:
            if found[1]:
                self.replay(tuple((where + suffix, rule) for suffix, rule in found[1]))
            return found[0]
        new, hits = self.capture(self.text, text, where, key)
        if len(self._memo) > 200_000:
            self._memo.clear()
        # the hits of text() are at ``where`` or below it (a JSON text's keys): keep their suffixes
        if all(w.startswith(where) for w, _rule in hits):
            self._memo[memo_key] = (new, tuple((w[len(where):], rule) for w, rule in hits))
        return new

    # -- learning (strict) ----------------------------------------------------------
    def learn(self, obj: Any, key: str = "") -> None:
        """Collect host and user names from host/user keys (also ``NAME=value`` inside strings)."""
        if not self.strict:
            return
        if isinstance(obj, dict):
            for k, v in obj.items():
                self.learn(v, str(k))
        elif isinstance(obj, list):
            for v in obj:
                self.learn(v, key)
        elif isinstance(obj, ColumnRows):
            self.learn(obj.rows(), key)
        elif isinstance(obj, str):
            if key:
                self._learn_value(key, obj)
            if "=" in obj:
                for m in _ASSIGNMENT.finditer(obj):
                    self._learn_value(m.group("name"), _unquote(m.group("val")))

    def _learn_value(self, key: str, value: str) -> None:
        if is_host_key(key):
            target = self.learned_hosts
        elif is_user_key(key):
            target = self.learned_users
        else:
            return
        for part in re.split(r"[\s,;]+", value):
            part = part.strip("\"'[]()")
            candidates = {part}
            if _FQDN.fullmatch(part) or "." in part and not _IPV4.fullmatch(part):
                candidates.add(part.split(".")[0])
            for c in candidates:
                if len(c) >= 3 and not c.isdigit() and c.lower() not in _GENERIC_NAMES and not _IPV4.fullmatch(c):
                    if c not in target:
                        target.add(c)
                        self._learned_dirty = True

    def _learned_pattern(self) -> re.Pattern[str] | None:
        if self._learned_dirty:
            names = sorted(self.learned_hosts | self.learned_users, key=len, reverse=True)
            alternatives = "|".join(map(re.escape, names))
            self._learned_re = (re.compile(r"(?<![A-Za-z0-9])(?:" + alternatives + r")(?![A-Za-z0-9])")
                                if names else None)
            self._learned_dirty = False
            self._memo.clear()
        return self._learned_re

    # -- structures ----------------------------------------------------------------
    def value(self, obj: Any, where: str = "", key: str = "", secret: bool = False) -> Any:
        """A scrubbed copy of ``obj`` (``key`` is the key it sits under, for context)."""
        if secret:
            return self._secret_value(obj, where)
        if isinstance(obj, dict):
            out: dict[Any, Any] = {}
            for k, v in obj.items():
                ks = str(k)
                child = f"{where}.{ks}" if where else ks
                # a key is written out like a value (ranks.json, reports): a token used as a key leaks too
                name = self._key_name(k, child, out)
                kind = type(v)
                if (kind is int or kind is float or kind is bool or v is None) and not is_secret_key(ks):
                    out[name] = v  # what keyed() gives a number under a key that is not secret, without the calls
                else:
                    out[name] = self.keyed(ks, v, child)
            return out
        if isinstance(obj, (list, tuple)):
            return self._list(obj, where + "[]", key)
        if isinstance(obj, str):
            return self.text_cached(obj, where, key)
        if isinstance(obj, ColumnRows):
            return self.column_rows(obj, where + "[]", key)
        return obj

    def keyed(self, key: str, value: Any, where: str) -> Any:
        """Scrub ``value`` found under ``key``."""
        if is_secret_key(key):
            return self._secret_value(value, where)
        if self.strict and isinstance(value, str) and value and value != REDACTED:
            if is_host_key(key):
                self.hit(where, "hostname")
                return REDACTED
            if is_user_key(key):
                self.hit(where, "username")
                return REDACTED
        return self.value(value, where, key)

    def _key_name(self, key: Any, where: str, taken: dict[Any, Any]) -> Any:
        """``key`` with its secret parts replaced (non-strings as they are); a replaced key that
        collides with one already in ``taken`` gets a number (``<redacted>#2``), so no value is lost."""
        if not isinstance(key, str):
            return key
        known = self._memo.get((key, ""))
        if known is not None and not known[1] and known[0] == key:
            return key  # a key already seen clean (report tables repeat their column names in every row)
        new = self.text_cached(key, where + " (key)")
        if new == key:
            return key
        candidate, n = new, 1
        while candidate in taken:
            n += 1
            candidate = f"{new}#{n}"
        return candidate

    def _secret_value(self, obj: Any, where: str) -> Any:
        if isinstance(obj, dict):
            return {k: self._secret_value(v, f"{where}.{k}") for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._secret_value(v, where + "[]") for v in obj]
        if isinstance(obj, ColumnRows):
            return self._secret_value(obj.rows(), where)
        if obj is None or isinstance(obj, bool) or obj == "" or obj == REDACTED:
            return obj
        if isinstance(obj, str) and _VERSION_VALUE.fullmatch(obj):
            return obj
        if isinstance(obj, (str, int, float)):
            self.hit(where, "secret_key")
            return REDACTED
        return obj

    def _list(self, items: Any, where: str, key: str) -> list[Any]:
        out = []
        redact_next = False
        for item in items:
            if redact_next and isinstance(item, str) and item and not item.startswith("-") and item != REDACTED:
                self.hit(where, "cli_flag")
                out.append(REDACTED)
                redact_next = False
                continue
            redact_next = isinstance(item, str) and is_secret_flag(item)
            out.append(self.value(item, where, key))
        return out

    def column_rows(self, table: ColumnRows, where: str, key: str = "") -> list[dict[Any, Any]]:
        """What ``self._list(table.rows(), where, key)`` gives (the same rows, and the same hits,
        counted once per cell), computed column by column: each key name scrubbed once, each
        distinct string of a column once, numbers passed on. Row dicts are never strings, so the
        list's ``--flag value`` rule cannot apply between rows; without strict mode a value's
        scrub depends on its key and itself only, so the order of the cells does not matter. In
        strict mode a JSON text can teach a name that changes the cells after it: there the rows
        are scrubbed one by one, as a list."""
        n_rows = len(table)
        if n_rows == 0:
            return []
        if self.strict:
            return self._list(table.rows(), where, key)
        # each row is dict(zip(columns, row)): a repeated name keeps its first place, its last column
        last = {k: j for j, k in enumerate(table.columns)}
        names: dict[Any, list[Any]] = {}  # scrubbed key -> its cells (a row dict's keys, in order)
        for k, j in last.items():
            ks = str(k)
            child = f"{where}.{ks}" if where else ks
            name, hits = self.capture(self._key_name, k, child, names)
            self.replay(hits * (n_rows - 1))  # a key is scrubbed in every row
            names[name] = self.column(ks, table.values[j][:n_rows], child)
        return [dict(zip(names, row)) for row in zip(*names.values())]

    def column(self, key: str, cells: list[Any], where: str) -> list[Any]:
        """``[self.keyed(key, v, where) for v in cells]``, each distinct string scrubbed once (its
        hits counted for every cell that holds it) and numbers passed on without a call."""
        kinds = set(map(type, cells))
        if kinds <= _PLAIN_SCALARS and not is_secret_key(key):
            return list(cells)
        if not (kinds <= {str, type(None)}) or self.strict:
            return [self.keyed(key, v, where) for v in cells]
        scrubbed: dict[Any, Any] = {None: None}
        secret = is_secret_key(key)
        for text, count in Counter(cells).items():
            if text is None:
                continue
            # keyed() of a string under a key that is not secret is text_cached() (strict is handled above)
            new, hits = (self.capture(self.keyed, key, text, where) if secret
                         else self.capture(self.text_cached, text, where, key))
            self.replay(hits * (count - 1))
            scrubbed[text] = new
        return [scrubbed[v] for v in cells]

    # -- text ----------------------------------------------------------------------
    def text(self, text: str, where: str = "", key: str = "") -> str:
        """Replace the secret parts of one string (not memoised; see :meth:`text_cached`)."""
        if len(text) < 4 or text == REDACTED:
            return text
        if text[:1] in ("{", "[") and text[-1:] in ("}", "]"):
            structured = self._json_text(text, where, key)
            if structured is not None:
                return structured
        out = text
        if "PRIVATE KEY" in out:
            out = _PRIVATE_KEY_BLOCK.sub(lambda _m: self._replaced(where, "private_key_block"), out)
        if "://" in out:
            out = _URL_CREDENTIALS.sub(lambda m: self._url_credentials(m, where), out)
        if _SHAPE_PREFIXES.search(out):
            out = _SHAPES.sub(lambda m: self._replaced(where, m.lastgroup or "token"), out)
        if "=" in out or ":" in out:
            out = _scan_sub(_ASSIGNMENT, out, lambda m: self._assignment(m, where))
        if "-" in out:
            out = _scan_sub(_FLAG, out, lambda m: self._flag(m, where))
        if "earer" in out or "EARER" in out:
            out = _BEARER.sub(lambda m: self._bearer(m, where), out)
        if len(out) >= HIGH_ENTROPY_MIN_LENGTH:
            out = _CANDIDATE.sub(lambda m: self._entropy(m, where), out)
        if self.strict:
            out = self._strict_text(out, where, key)
        return out

    def _json_text(self, text: str, where: str, key: str) -> str | None:
        """A string holding a JSON document (``distributedInfo``, nsys ``CpuInfo``, a logged
        config) is scrubbed as a structure, so argv lists and secret keys inside it are seen;
        it is re-encoded only when something changed. None when the text is not JSON."""
        try:
            obj = _ANY.decode(text)
        except (msgspec.DecodeError, UnicodeEncodeError):
            return None
        if not isinstance(obj, (dict, list)):
            return None
        self.learn(obj)
        new = self.value(obj, where, key)
        if new == obj:
            return text
        return msgspec.json.encode(new).decode()

    def _replaced(self, where: str, rule: str) -> str:
        self.hit(where, rule)
        return REDACTED

    def _url_credentials(self, m: re.Match[str], where: str) -> str:
        if m.group("password") == REDACTED:
            return m.group(0)
        self.hit(where, "url_password")
        user = m.group("user")
        if self.strict and user:
            self.hit(where, "username")
            user = REDACTED
        return f"{m.group('head')}{user}:{REDACTED}@"

    def _assignment(self, m: re.Match[str], where: str) -> str | None:
        name = m.group("name")
        if not is_secret_key(name):
            return None
        return self._replace_value(m, "assignment", f"{where} {name}=")

    def _flag(self, m: re.Match[str], where: str) -> str | None:
        name = m.group("flag").lstrip("-")
        if len(name) < 2 or not is_secret_key(name) or m.group("val").startswith("-"):
            return None
        return self._replace_value(m, "cli_flag", f"{where} {m.group('flag')}")

    def _bearer(self, m: re.Match[str], where: str) -> str:
        if m.group("val") == REDACTED or m.group("val").startswith("<"):
            return m.group(0)
        self.hit(where, "auth_header")
        return m.group("scheme") + REDACTED

    def _replace_value(self, m: re.Match[str], rule: str, place: str) -> str:
        """The match with its ``val`` group redacted (quotes kept), counted at ``place``."""
        val = m.group("val")
        inner = _unquote(val)
        if (not inner or inner == REDACTED or inner.startswith("$") or inner.startswith("<redacted")
                or _VERSION_VALUE.fullmatch(inner)):
            return m.group(0)
        self.hit(place, rule)
        quote = val[0] if val[:1] in ("'", '"') and len(val) >= 2 and val[-1] == val[0] else ""
        start, end = m.span("val")
        whole_start = m.start()
        text = m.group(0)
        return text[: start - whole_start] + quote + REDACTED + quote + text[end - whole_start:]

    def _entropy(self, m: re.Match[str], where: str) -> str:
        token = m.group(0)
        if _high_entropy_secret(token):
            self.hit(where, "high_entropy")
            return REDACTED
        if "/" in token and not _random_looking(token):
            # a base64 blob may hold '/', a path is never random as a whole: try the segments
            parts = token.split("/")
            if any(_high_entropy_secret(p) for p in parts):
                self.hit(where, "high_entropy")
                return "/".join(REDACTED if _high_entropy_secret(p) else p for p in parts)
        return token

    def _strict_text(self, out: str, where: str, key: str) -> str:
        if "@" in out:
            out = _EMAIL.sub(lambda _m: self._replaced(where, "username"), out)
        # paths first: a name replaced inside a path would end the path match early
        if "/" in out:
            out = _POSIX_PATH.sub(lambda m: self._path(m.group(0), "/", where), out)
        if ":\\" in out:
            out = _WINDOWS_PATH.sub(lambda m: self._path(m.group(0), "\\", where), out)
        learned = self._learned_pattern()
        if learned is not None:
            out = learned.sub(lambda m: self._replaced(
                where, "hostname" if m.group(0) in self.learned_hosts else "username"), out)
        if "." in out:
            out = _FQDN.sub(lambda _m: self._replaced(where, "hostname"), out)
        if "ip-" in out:
            out = _IP_HOST.sub(lambda _m: self._replaced(where, "hostname"), out)
        if "." in out and not (key and _is_version_key(key)):
            out = _IPV4.sub(lambda m: self._ip(m, where), out)
        return out

    def _ip(self, m: re.Match[str], where: str) -> str:
        before = m.string[max(0, m.start() - 40): m.start()]
        if _VERSION_BEFORE.search(before):
            return m.group(0)
        self.hit(where, "ip_address")
        return REDACTED

    def _path(self, path: str, sep: str, where: str) -> str:
        if _HOME_ONLY.match(path) or _WINDOWS_HOME_ONLY.match(path):
            self.hit(where, "username")
            return REDACTED
        parts = [p for p in path.split(sep) if p]
        base = parts[-1] if parts else path
        if base in self.learned_users:
            self.hit(where, "username")
            return REDACTED
        self.hit(where, "path")
        return base


def _scan_sub(pattern: re.Pattern[str], text: str, repl: Any) -> str:
    """Like ``pattern.sub(repl, text)``, but when ``repl`` declines a match (returns None) the
    scan resumes right after its separator, so a non-secret ``name: "value"`` does not hide the
    assignments inside its value (``"env": "A=1;MY_SECRET=x"``)."""
    pieces: list[str] = []
    pos = 0
    scan = 0
    while True:
        m = pattern.search(text, scan)
        if m is None:
            break
        replacement = repl(m)
        if replacement is None:
            scan = max(m.end("sep"), m.start() + 1)
            continue
        pieces.append(text[pos: m.start()])
        pieces.append(replacement)
        pos = scan = m.end()
    if not pieces:
        return text
    pieces.append(text[pos:])
    return "".join(pieces)


def _unquote(val: str) -> str:
    if len(val) >= 2 and val[0] == val[-1] and val[0] in ("'", '"'):
        return val[1:-1]
    return val


def is_secret_flag(item: str) -> bool:
    m = _FLAG_ONLY.fullmatch(item)
    return m is not None and len(m.group("name")) > 1 and is_secret_key(m.group("name"))


# ------------------------------------------------------------------------------ public helpers


def scrub_with_report(obj: Any, *, strict: bool = False) -> tuple[Any, RedactionReport]:
    """:func:`scrub`, also returning what was replaced."""
    scrubber = Scrubber(strict)
    scrubber.learn(obj)
    return scrubber.value(obj), scrubber.report


def scrub(obj: Any, *, strict: bool = False) -> Any:
    """A deep copy of JSON-like ``obj`` (dicts, lists, strings, numbers) with secrets replaced by
    ``"<redacted>"``: values under secret keys, and secret parts of strings. Keys are kept.
    With ``strict``, host names, IP addresses, user names and absolute paths go too."""
    return scrub_with_report(obj, strict=strict)[0]


def scrub_text(text: str, *, strict: bool = False) -> str:
    """One string with its secret parts replaced (see :func:`scrub`)."""
    scrubber = Scrubber(strict)
    scrubber.learn(text)
    return scrubber.text(text)


def looks_secret(value: str) -> bool:
    """True when ``value`` is, or contains, a secret by its shape (known token prefixes, JWTs,
    private key blocks, URL passwords, ``SECRET_NAME=value`` assignments, long random strings).

    >>> looks_secret("hf_" + "a1B2" * 9), looks_secret("D74EA3FAC1814011AB8FC4FC00427B48")
    (True, False)
    """
    if not isinstance(value, str):
        return False
    return Scrubber(False).text(value) != value


def scrub_metadata(ranks: dict[int, Any], *, strict: bool = False) -> dict[int, dict[str, Any]]:
    """Per rank, ``RankInfo.to_json()`` with every value scrubbed: what renderers may echo."""
    scrubber = Scrubber(strict)
    data = {rank: info.to_json() for rank, info in ranks.items()}
    scrubber.learn(data)
    return {rank: scrubber.value(d, f"rank{rank}") for rank, d in data.items()}


# ------------------------------------------------------------------------------------ input names


def input_dirs(source_paths: Iterable[str]) -> list[str]:
    """The directories of the inputs, longest first: what :func:`without_input_dirs` removes."""
    dirs = sorted({str(Path(str(p)).parent) for p in source_paths}, key=len, reverse=True)
    return [d for d in dirs if d not in ("", ".")]


def without_input_dirs(message: str, dirs: Iterable[str]) -> str:
    """``message`` naming the inputs by file name, as the report's ``inputs`` do: their directories
    (``dirs``, from :func:`input_dirs`) are left out, as given (absolute or relative), since they
    can name users and machines."""
    for d in dirs:
        message = message.replace(d + "/", "").replace(d + "\\", "")
    return message
