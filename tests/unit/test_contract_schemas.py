"""The published JSON Schemas are what the models generate, and real records validate against them."""

from __future__ import annotations

import jsonschema
import orjson
import pytest

from schemas import codec
from schemas.export import CONTRACTS, DEFAULT, render
from streams.decide.policy import JobRecord, plan
from streams.decide.policy_config import JobPolicy
from tests.unit.test_policy_engine import NOW, incident


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_the_published_schema_is_what_the_model_generates(name: str):
    assert (DEFAULT / f"{name}.schema.json").read_text() == render(CONTRACTS[name]), (
        "run: python -m schemas.export"
    )


def test_a_real_action_and_isolation_request_validate_against_the_published_schemas():
    from schemas.actions import Mode

    p = plan(incident(), JobPolicy(), Mode.ACT, JobRecord(), NOW)
    for record, name in [(p.actions[0], "action"), (p.isolations[0], "isolation-request")]:
        schema = orjson.loads((DEFAULT / f"{name}.schema.json").read_bytes())
        jsonschema.validate(codec.loads(codec.dumps(record)), schema)
    broken = codec.loads(codec.dumps(p.actions[0]))
    broken["kind"] = "reboot_everything"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, orjson.loads((DEFAULT / "action.schema.json").read_bytes()))
