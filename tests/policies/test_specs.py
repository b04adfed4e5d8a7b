"""Agent specs: what a model source that is not a model folder is told."""
from __future__ import annotations

import pytest

from sepo.errors import SepoError
from sepo.policies.specs import check_model_source


def test_a_run_folder_given_as_a_model_names_its_model(tmp_path):
    """Found: `--agent hf:RUN` (the run folder of `sepo sft` or `sepo train`, not its model/) said
    only that RUN is not a model folder; the line now names RUN/model and run:RUN."""
    (tmp_path / "run" / "model").mkdir(parents=True)
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    run = str(tmp_path / "run")
    with pytest.raises(SepoError, match=rf"holds a run whose model is '{run}/model' \(or give the run as run:{run}\)"):
        check_model_source(run)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SepoError) as info:
        check_model_source(str(tmp_path / "empty"))
    assert "holds a run" not in str(info.value)
    check_model_source(f"{run}/model")
