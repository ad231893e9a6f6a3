"""Run metadata from --meta and --meta-file (YAML)."""

import pytest

from vllm_load.settings import Settings
from vllm_load.user_values import SettingsError, load_meta_file


class Options:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_meta_file_is_flattened_and_meta_overrides_it(tmp_path):
    path = tmp_path / "meta.yaml"
    path.write_text(
        "hardware: 8x MI325X\ngpus: 8\ngpu:\n  vram_gb: 256\nimage: {digest: 'sha256:abc'}\ntags: [a, b]\n"
    )
    assert load_meta_file(str(path)) == {
        "hardware": "8x MI325X",
        "gpus": "8",
        "gpu.vram_gb": "256",
        "image.digest": "sha256:abc",
        "tags": "a,b",
    }
    settings = Settings.from_options(Options(meta_file=str(path), meta=["gpus=4", "note=x"]))
    assert (
        settings.meta["gpus"] == "4"
        and settings.meta["hardware"] == "8x MI325X"
        and settings.meta["note"] == "x"
    )


@pytest.mark.parametrize(
    "text, message", [("- a\n- b\n", "expected a mapping"), ("a: [1,\n", "not valid YAML")]
)
def test_bad_meta_files_are_one_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message):
        load_meta_file(str(path))
    with pytest.raises(SettingsError, match="No such file"):
        load_meta_file(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "value, expected", [(None, None), ("", None), ("  ", None), ("0.5", 0.5), (0, 0.0)]
)
def test_temperature_from_the_web_ui_form_is_a_number_or_unset(value, expected):
    # Locust's web UI sends an unset custom parameter back as "" (and set ones as text)
    assert Settings.from_options(Options(temperature=value)).temperature == expected


def test_a_temperature_that_is_no_number_is_one_clear_error():
    with pytest.raises(SettingsError, match="--temperature must be a number"):
        Settings.from_options(Options(temperature="hot"))
