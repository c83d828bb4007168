"""Config: TOML + env, validated, errors that name the key; the example file is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config import ConfigError, GpuBackendKind, load_settings

EXAMPLE = Path(__file__).resolve().parents[1] / "deploy" / "gpuwatch.toml"


def test_example_config_is_valid_and_shows_the_defaults():
    example = load_settings(EXAMPLE)
    defaults = load_settings(None)
    for section in ("agent", "gpu", "daemon", "slurm", "classify", "retention", "alerts"):
        ex, de = getattr(example, section), getattr(defaults, section)
        for key in type(ex).model_fields:
            if key in {"node", "spool_dir"}:
                continue
            assert getattr(ex, key) == getattr(de, key), f"{section}.{key}"


def test_toml_env_and_overrides(tmp_path, monkeypatch):
    cfg = tmp_path / "g.toml"
    cfg.write_text('[agent]\ninterval_s = 5\nnode = "n1"\n[gpu]\nbackend = "sim"\n')
    monkeypatch.setenv("GPUWATCH_AGENT__INTERVAL_S", "7")
    monkeypatch.setenv("GPUWATCH_DB", "postgres://u@h/db")
    s = load_settings(cfg)
    assert s.agent.interval_s == 7  # env beats file
    assert s.agent.node == "n1"
    assert s.gpu.backend is GpuBackendKind.SIM
    assert s.database.url == "postgresql+psycopg://u@h/db"
    s2 = load_settings(cfg, database={"url": "sqlite:///x.db"})
    assert s2.database.url == "sqlite:///x.db"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[agent]\ninterval_s = -1\n", "agent.interval_s"),
        ("[agent]\nbogus = 1\n", "agent.bogus"),
        ('[gpu]\nbackend = "cuda"\n', "gpu.backend"),
        ('[daemon]\nlisten = "8470"\n', "daemon.listen"),
        ("[daemon]\nbody_timeout_s = 0\n", "daemon.body_timeout_s"),
        ('[database]\nurl = "mysql://x"\n', "database.url"),
        ('[agent]\ndaemon_url = "ftp://x"\n', "agent.daemon_url"),
        ("[agent\n", "cannot read config"),
    ],
)
def test_bad_values_name_the_key(tmp_path, text, words):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_settings(cfg)


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_token_file(tmp_path):
    token = tmp_path / "token"
    token.write_text("gw1_abc\n")
    s = load_settings(None, agent={"token_file": str(token)})
    assert s.agent.resolve_token() == "gw1_abc"
    s = load_settings(None, agent={"token_file": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match=r"agent\.token_file"):
        s.agent.resolve_token()


def test_example_config_names_every_key():
    """deploy/gpuwatch.toml documents every key of every section (commented out or set)."""
    import re

    from gpuwatch.config import Settings

    text = EXAMPLE.read_text()
    for section, field in Settings.model_fields.items():
        model = field.annotation
        assert f"[{section}]" in text, section
        body = text.split(f"[{section}]", 1)[1].split("\n[", 1)[0]
        for key in model.model_fields:
            as_table = re.search(rf"^#? ?\[\[?{section}\.{key}\]", text, re.M)
            assert re.search(rf"^#? ?{key} = ", body, re.M) or as_table, (
                f"{section}.{key} missing from the example"
            )


def test_process_days_cannot_outlive_raw_days():
    with pytest.raises(Exception, match="process_days must be <= raw_days"):
        load_settings(None, retention={"raw_days": 7, "process_days": 8})
    assert load_settings(None, retention={"raw_days": 7, "process_days": 2}).retention.process_days == 2


def test_a_check_across_keys_does_not_print_the_section():
    """A section-wide check names its keys and leaves the section's values out: they may be
    secrets (a webhook URL, a password)."""
    with pytest.raises(ConfigError) as exc:
        load_settings(
            None,
            alerts={
                "slack": {"webhook_url": "https://hooks.slack.com/services/T/B/SECRET"},
                "email": {"host": "smtp", "password": "hunter2"},
                "digest": {"weekly_user_via": ["slack_dm"]},
            },
        )
    text = str(exc.value)
    assert "digest.weekly_user_via names 'slack_dm' but [alerts.slack_dm] has no bot_token" in text
    assert "SECRET" not in text and "hunter2" not in text


def test_retention_tiers_nest_raw_inside_minutes_inside_hours():
    retention = load_settings(None).retention
    assert (retention.raw_days, retention.minute_days, retention.rollup_days) == (14, 14, 400)
    with pytest.raises(Exception, match="minute_days must be >= raw_days"):
        load_settings(None, retention={"raw_days": 30, "minute_days": 14, "batch_record_days": 30})
    with pytest.raises(Exception, match="rollup_days must be >= minute_days"):
        load_settings(None, retention={"minute_days": 60, "rollup_days": 30})
    loaded = load_settings(None, retention={"raw_days": 7, "minute_days": 30, "rollup_days": 30})
    assert loaded.retention.minute_days == 30


def test_a_retired_key_is_ignored_with_a_warning_and_a_typo_still_stops(tmp_path, caplog):
    """A config written for an older version starts: ``daemon.copy_min_rows`` (retired) is
    dropped and named in a warning; a key that never existed still stops start-up."""
    cfg = tmp_path / "gpuwatch.toml"
    cfg.write_text("[daemon]\ncopy_min_rows = 512\ningest_writers = 3\n")
    with caplog.at_level("WARNING"):
        settings = load_settings(cfg)
    assert settings.daemon.ingest_writers == 3 and not hasattr(settings.daemon, "copy_min_rows")
    assert any("copy_min_rows is retired and ignored" in r.getMessage() for r in caplog.records)
    cfg.write_text("[daemon]\ncopy_min_row = 512\n")
    with pytest.raises(ConfigError, match="copy_min_row"):
        load_settings(cfg)
