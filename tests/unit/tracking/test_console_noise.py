"""What ``make run`` prints is the project's own account of the run: third-party housekeeping
(mlflow creating its tables, mlflow's artifact bar when the adapter is saved as a model) is kept
off the console at its source, and the closing block names the make targets that open the UIs."""

from automem_dagster.commands.render import print_where_to_look
from automem_dagster.loop.storage import Storage
from automem_dagster.tracking import Tracker
from automem_dagster.tracking.specialist_model import log_specialist_model


def test_where_to_look_gives_the_make_targets_not_a_raw_mlflow_command(tmp_path, capfd):
    print_where_to_look(Storage(runs=tmp_path / "runs", lineage=tmp_path / "lineage"))
    shown = capfd.readouterr().err
    assert "make dagster" in shown and "make mlflow-ui" in shown and "http://127.0.0.1:5000" in shown
    assert "--backend-store-uri" not in shown and "mlflow ui" not in shown


def test_a_new_store_and_a_logged_adapter_print_no_mlflow_housekeeping(tmp_path, capfd):
    tracker = Tracker(f"sqlite:///{tmp_path}/mlflow.db", artifact_root=tmp_path / "artifacts")
    experiment = tracker.experiment_id("crafter")          # creates and migrates the sqlite store
    run_id = tracker.client.create_run(experiment, run_name="training").info.run_id
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    for name in ("adapter_config.json", "adapter_model.safetensors", "README.md"):  # what save_pretrained writes
        (adapter / name).write_text("{}")
    model = log_specialist_model(tracker.client, experiment, run_id, "a1", adapter, "embedded", {"automem.adapter": "a1"})
    assert model.model_id
    err = capfd.readouterr().err
    assert "Creating initial MLflow database tables" not in err and "Updating database tables" not in err
    assert "Downloading artifacts" not in err
