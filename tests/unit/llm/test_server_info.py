"""The embedded server's identity hashes its adapter files and asks the server again when its package
changed (``llm/server_info.py``)."""

from automem_dagster.llm.config import load_endpoints
from automem_dagster.llm.embedded_server import GGUF_NAME
from automem_dagster.llm.server_info import embedded_identity, file_digest, package_version
from automem_dagster.paths import DEFAULT_ENDPOINTS


def test_the_embedded_identity_hashes_the_adapter_files_and_asks_the_server_when_its_package_changed(tmp_path):
    adapter = tmp_path / "specialist.gguf"
    adapter.write_bytes(b"weights one")
    config = load_endpoints(DEFAULT_ENDPOINTS).game.model_copy(update={"lora_id": 0})
    server = {"kind": "llama.cpp", "version": "b0-unknown", "model_file": GGUF_NAME, "package": package_version("xllamacpp")}
    recorded = {"server": server, "model": config.model, "model_card": {"listed": False}}
    first = embedded_identity(config, [adapter], recorded)
    assert first["adapter"] == {"lora_id": 0, "name": "specialist.gguf", "sha256": file_digest(adapter), "base": None}
    assert first["server"] == server and first["sampling"]["temperature"] == config.temperature
    adapter.write_bytes(b"weights two")
    assert embedded_identity(config, [adapter], recorded)["adapter"]["sha256"] != first["adapter"]["sha256"]
    assert embedded_identity(config, [adapter], {**recorded, "server": {**server, "package": "0.0.1"}}) is None
    assert embedded_identity(config, [adapter], {**recorded, "model": "another"}) is None
    assert embedded_identity(config.model_copy(update={"base_url": "http://127.0.0.1:9"}), [adapter], recorded) is None
