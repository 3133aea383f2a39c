"""The job token (star.rpc.security): where it is read from, what is refused, how it is compared, and that it
never shows up in an error message or a repr."""

from __future__ import annotations

import hmac

import pytest

from star.config import ConfigError, SecurityConfig
from star.rpc import security
from star.rpc.security import (
    MIN_TOKEN_CHARS,
    TOKEN_ENV,
    TOKEN_METADATA_KEY,
    Credentials,
    check_token,
    load_token,
    token_problem,
)

FILE_TOKEN = "file-token-" + "A1b2C3d4" * 3
ENV_TOKEN = "env-token-" + "Z9y8X7w6" * 3
SHORT = "Sh0rt-s3cret"  # fewer than MIN_TOKEN_CHARS characters, distinctive enough to search for


def _token_file(tmp_path, text: str) -> SecurityConfig:
    path = tmp_path / "job.token"
    path.write_text(text)
    return SecurityConfig(token_file=str(path))


def _everything_said(error: BaseException) -> str:
    """All an error would show: its message, its repr, and the fields of a ConfigError."""
    return " ".join([str(error), repr(error), repr(getattr(error, "value", "")), str(getattr(error, "field", ""))])


# ---------------------------------------------------------------- sources and precedence


def test_the_token_is_read_from_the_token_file(tmp_path):
    assert load_token(_token_file(tmp_path, FILE_TOKEN), environ={}) == FILE_TOKEN


def test_the_token_is_read_from_the_environment_variable(tmp_path):
    assert load_token(SecurityConfig(), environ={TOKEN_ENV: ENV_TOKEN}) == ENV_TOKEN


def test_without_an_environ_argument_the_process_environment_is_read(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, ENV_TOKEN)
    assert load_token(SecurityConfig()) == ENV_TOKEN
    monkeypatch.delenv(TOKEN_ENV)
    assert load_token(SecurityConfig()) is None


def test_the_token_file_wins_over_the_environment_variable(tmp_path):
    assert load_token(_token_file(tmp_path, FILE_TOKEN), environ={TOKEN_ENV: ENV_TOKEN}) == FILE_TOKEN


def test_the_token_file_wins_even_when_the_environment_token_is_invalid(tmp_path):
    assert load_token(_token_file(tmp_path, FILE_TOKEN), environ={TOKEN_ENV: SHORT}) == FILE_TOKEN


def test_no_file_and_no_variable_means_no_token(tmp_path):
    assert load_token(SecurityConfig(), environ={}) is None


@pytest.mark.parametrize("value", ["", " ", "\n", " \t\n "])
def test_an_empty_or_blank_environment_variable_means_no_token(value):
    assert load_token(SecurityConfig(), environ={TOKEN_ENV: value}) is None


def test_credentials_load_takes_the_token_from_the_given_environment(tmp_path):
    assert Credentials.load(SecurityConfig(), environ={TOKEN_ENV: ENV_TOKEN}).token == ENV_TOKEN
    assert Credentials.load(_token_file(tmp_path, FILE_TOKEN), environ={TOKEN_ENV: ENV_TOKEN}).token == FILE_TOKEN
    assert Credentials.load(SecurityConfig(), environ={}).token is None


# ---------------------------------------------------------------- whitespace


@pytest.mark.parametrize("padding", [("", "\n"), ("  ", "  \n"), ("\t", "\r\n"), ("\n\n", "\n\n")])
def test_whitespace_around_the_file_token_is_stripped(tmp_path, padding):
    before, after = padding
    assert load_token(_token_file(tmp_path, before + FILE_TOKEN + after), environ={}) == FILE_TOKEN


@pytest.mark.parametrize("padding", [("", "\n"), ("  ", "  "), ("\t", "\r\n")])
def test_whitespace_around_the_environment_token_is_stripped(padding):
    before, after = padding
    assert load_token(SecurityConfig(), environ={TOKEN_ENV: before + ENV_TOKEN + after}) == ENV_TOKEN


def test_whitespace_inside_a_token_is_refused_without_showing_it(tmp_path):
    inner = FILE_TOKEN[:10] + " " + FILE_TOKEN[10:]
    with pytest.raises(ConfigError) as error:
        load_token(_token_file(tmp_path, inner), environ={})
    assert error.value.field == "security.token_file"
    assert "printable ASCII" in str(error.value)
    said = _everything_said(error.value)
    assert FILE_TOKEN[:10] not in said and FILE_TOKEN[10:] not in said


@pytest.mark.parametrize("bad_char", ["\x00", "\x7f", "é", "\u2028"])
def test_non_printable_or_non_ascii_tokens_are_refused_without_showing_them(bad_char):
    token = ENV_TOKEN[:8] + bad_char + ENV_TOKEN[8:]
    with pytest.raises(ConfigError) as error:
        load_token(SecurityConfig(), environ={TOKEN_ENV: token})
    assert error.value.field == TOKEN_ENV
    said = _everything_said(error.value)
    assert ENV_TOKEN[8:] not in said and ENV_TOKEN[:8] not in said


# ---------------------------------------------------------------- too short: refused, source named, token never printed


def test_a_too_short_file_token_is_refused_naming_the_file_source_but_not_the_token(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_token(_token_file(tmp_path, SHORT + "\n"), environ={})
    assert error.value.field == "security.token_file"
    message = str(error.value)
    assert "security.token_file" in message and str(MIN_TOKEN_CHARS) in message
    assert f"<{len(SHORT)} characters>" in message  # the length, never the value
    assert SHORT not in _everything_said(error.value)


def test_a_too_short_environment_token_is_refused_naming_the_variable_but_not_the_token():
    with pytest.raises(ConfigError) as error:
        load_token(SecurityConfig(), environ={TOKEN_ENV: "  " + SHORT + "  "})
    assert error.value.field == TOKEN_ENV
    assert TOKEN_ENV in str(error.value) and str(MIN_TOKEN_CHARS) in str(error.value)
    assert SHORT not in _everything_said(error.value)


def test_credentials_load_refuses_a_short_token_without_showing_it():
    with pytest.raises(ConfigError) as error:
        Credentials.load(SecurityConfig(), environ={TOKEN_ENV: SHORT})
    assert SHORT not in _everything_said(error.value)


def test_the_length_limit_is_inclusive():
    exactly = "k" * MIN_TOKEN_CHARS
    assert check_token(exactly, "test") == exactly
    with pytest.raises(ConfigError):
        check_token(exactly[:-1], "test")


def test_check_token_names_the_source_it_is_given():
    with pytest.raises(ConfigError) as error:
        check_token(SHORT, "somewhere.special")
    assert error.value.field == "somewhere.special" and "somewhere.special" in str(error.value)
    assert SHORT not in _everything_said(error.value)


# ---------------------------------------------------------------- a missing token file


def test_a_missing_token_file_is_refused_by_the_config_naming_the_field(tmp_path):
    missing = tmp_path / "nope.token"
    with pytest.raises(ConfigError) as error:
        SecurityConfig(token_file=str(missing))
    assert error.value.field == "security.token_file"
    assert "no such file" in str(error.value)


def test_a_token_file_deleted_after_the_config_was_checked_fails_loudly(tmp_path):
    config = _token_file(tmp_path, FILE_TOKEN)
    (tmp_path / "job.token").unlink()
    with pytest.raises((ConfigError, OSError)) as error:  # never falls back to the environment or to no token
        load_token(config, environ={TOKEN_ENV: ENV_TOKEN})
    assert ENV_TOKEN not in _everything_said(error.value)


def test_an_empty_token_file_is_refused_not_treated_as_no_token(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_token(_token_file(tmp_path, "\n"), environ={TOKEN_ENV: ENV_TOKEN})
    assert error.value.field == "security.token_file"


# ---------------------------------------------------------------- the server's check: constant time, exact


@pytest.fixture
def compare_spy(monkeypatch):
    """Every hmac.compare_digest call token_problem makes, and the real answer."""
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    return calls


def _problem(given, expected: str = ENV_TOKEN):
    return token_problem(expected, [("x-other", "1"), (TOKEN_METADATA_KEY, given)])


def test_the_right_token_passes_through_a_constant_time_comparison(compare_spy):
    assert _problem(ENV_TOKEN) is None
    assert _problem(ENV_TOKEN.encode()) is None  # a bytes metadata value compares the same
    assert len(compare_spy) == 2
    assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in compare_spy)


@pytest.mark.parametrize(
    "given",
    [
        ENV_TOKEN[:-1] + ("x" if ENV_TOKEN[-1] != "x" else "y"),  # same length, last character differs
        ("x" if ENV_TOKEN[0] != "x" else "y") + ENV_TOKEN[1:],  # same length, first character differs
        ENV_TOKEN[:-1],  # a prefix (shorter)
        ENV_TOKEN + "x",  # longer
        ENV_TOKEN.upper(),  # case matters
        " " + ENV_TOKEN,  # the server does not strip
        "",
        FILE_TOKEN,  # another valid-looking token
    ],
)
def test_any_other_token_fails_the_constant_time_comparison(compare_spy, given):
    problem = _problem(given)
    assert problem is not None and "wrong job token" in problem
    assert len(compare_spy) == 1, "every wrong token, whatever its length, goes through hmac.compare_digest"
    assert given not in problem or given == "", "the refusal must not echo the token sent"
    assert ENV_TOKEN not in problem


def test_a_missing_or_repeated_token_is_refused_before_any_comparison(compare_spy):
    missing = token_problem(ENV_TOKEN, [("x-other", "1")])
    assert missing is not None and "missing job token" in missing
    assert token_problem(ENV_TOKEN, None) is not None
    twice = token_problem(ENV_TOKEN, [(TOKEN_METADATA_KEY, ENV_TOKEN), (TOKEN_METADATA_KEY, ENV_TOKEN)])
    assert twice is not None and "2 times" in twice
    assert not compare_spy
    assert ENV_TOKEN not in missing + twice


def test_the_comparison_is_the_timing_safe_one():
    """Not a spy artefact: the module uses the standard library's constant-time compare (not ==)."""
    assert security.hmac is hmac
    assert security.hmac.compare_digest is hmac.compare_digest


# ---------------------------------------------------------------- reprs never show secrets

KEY_PEM = b"-----BEGIN PRIVATE KEY-----\nTOP-SECRET-KEY-MATERIAL\n-----END PRIVATE KEY-----\n"
CERT_PEM = b"-----BEGIN CERTIFICATE-----\nCERT-BODY\n-----END CERTIFICATE-----\n"


def test_credentials_repr_shows_neither_the_token_nor_the_key():
    credentials = Credentials(token=ENV_TOKEN, cert_pem=CERT_PEM, key_pem=KEY_PEM, ca_pem=CERT_PEM, server_name="ps.example")
    for text in (repr(credentials), str(credentials), f"{credentials}", f"{credentials!r}"):
        assert ENV_TOKEN not in text
        assert "TOP-SECRET-KEY-MATERIAL" not in text and "PRIVATE KEY" not in text
    assert "ps.example" in repr(credentials)  # what is not secret is still shown


def test_loaded_credentials_repr_shows_neither_the_token_nor_the_key(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(CERT_PEM)
    key.write_bytes(KEY_PEM)
    token = tmp_path / "job.token"
    token.write_text(FILE_TOKEN + "\n")
    config = SecurityConfig(token_file=str(token), tls_cert_file=str(cert), tls_key_file=str(key))
    credentials = Credentials.load(config, environ={})
    assert credentials.token == FILE_TOKEN and credentials.key_pem == KEY_PEM
    text = repr(credentials)
    assert FILE_TOKEN not in text and "TOP-SECRET-KEY-MATERIAL" not in text


def test_the_security_config_holds_only_paths_never_the_token(tmp_path):
    config = _token_file(tmp_path, FILE_TOKEN)
    assert FILE_TOKEN not in repr(config)
