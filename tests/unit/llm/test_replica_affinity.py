"""An endpoint role's replicas are checked when the endpoints file is read."""

import pytest
from pydantic import ValidationError

from automem_dagster.llm import EndpointConfig


def test_replicas_are_checked_when_the_file_is_read():
    with pytest.raises(ValidationError, match="replicas need a remote base_url"):
        EndpointConfig(name="game", base_url="embedded", replicas=["http://127.0.0.1:9/v1"])
    with pytest.raises(ValidationError, match="not an http"):
        EndpointConfig(name="game", base_url="http://a:1/v1", replicas=["a:2/v1"])
    with pytest.raises(ValidationError, match="repeat a base URL"):
        EndpointConfig(name="game", base_url="http://a:1/v1", replicas=["http://a:1/v1"])
