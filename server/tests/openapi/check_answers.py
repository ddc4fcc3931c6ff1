"""Holds the HTTP door's OpenAPI document and real answers against each
other (run by tests/seed_contracts.rs in its venv).

    python check_answers.py OPENAPI_JSON ANSWERS_JSON

1. The document is valid OpenAPI 3.0 (openapi-spec-validator).
2. Every property of every schema has a description (or is a $ref to a
   described schema).
3. Each answer ({"method", "path", "status", "body"}, path as the
   document's template) validates against the schema the document gives
   for that operation and status (openapi-schema-validator, OpenAPI 3.0
   rules, formats checked: date-time is RFC 3339). An answer given as
   {"schema", "body"} (a push message: an SSE event's data, a WebSocket
   message) validates against components/schemas/<schema>.

Prints one line per problem and exits 1 if there is any; else prints
"ok: N answers".
"""

import json
import sys

from openapi_schema_validator import OAS30ReadValidator
from openapi_spec_validator import validate
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

DOC_URI = "urn:warden:openapi"


def pointer(*parts):
    return "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def undescribed(node, where):
    """Properties without a description, anywhere under node."""
    found = []
    if isinstance(node, dict):
        for name, prop in (node.get("properties") or {}).items():
            if isinstance(prop, dict) and "description" not in prop and "$ref" not in prop:
                found.append(f"{where}.{name}")
        for key, value in node.items():
            found += undescribed(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += undescribed(value, f"{where}[{i}]")
    return found


def validator(doc, registry, ref):
    return OAS30ReadValidator(
        {"$ref": f"{DOC_URI}#/{ref}"},
        registry=registry,
        format_checker=OAS30ReadValidator.FORMAT_CHECKER,
    )


def main():
    doc = json.load(open(sys.argv[1]))
    answers = json.load(open(sys.argv[2]))
    problems = []
    validate(doc)
    problems += [f"no description: {p}" for p in undescribed(doc, "doc")]

    registry = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT4)
    )
    # The format checks are on: a malformed date-time must fail, or this
    # script could not catch one.
    probe = OAS30ReadValidator(
        {"type": "string", "format": "date-time"},
        format_checker=OAS30ReadValidator.FORMAT_CHECKER,
    )
    if not list(probe.iter_errors("2026-13-45 nonsense")):
        problems.append("date-time formats are not checked (is rfc3339-validator installed?)")

    for a in answers:
        if "schema" in a:
            name = a["schema"]
            if name not in doc["components"]["schemas"]:
                problems.append(f"{name} message: no such schema")
                continue
            v = validator(doc, registry, pointer("components", "schemas", name))
            for e in v.iter_errors(a["body"]):
                at = "/".join(str(p) for p in e.absolute_path)
                problems.append(f"{name} message: {at or 'body'}: {e.message}")
            continue
        method, path, status = a["method"].lower(), a["path"], str(a["status"])
        what = f"{a['method']} {path} {status}"
        response = doc["paths"].get(path, {}).get(method, {}).get("responses", {}).get(status)
        if response is None:
            problems.append(f"{what}: not documented")
            continue
        ref = pointer("paths", path, method, "responses", status)
        if "$ref" in response:
            ref = response["$ref"].lstrip("#/")
            response = doc
            for part in ref.split("/"):
                response = response[part]
        if "schema" not in response.get("content", {}).get("application/json", {}):
            problems.append(f"{what}: no JSON schema documented")
            continue
        v = validator(doc, registry, ref + "/" + pointer("content", "application/json", "schema"))
        for e in v.iter_errors(a["body"]):
            at = "/".join(str(p) for p in e.absolute_path)
            problems.append(f"{what}: {at or 'body'}: {e.message}")

    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"ok: {len(answers)} answers")


if __name__ == "__main__":
    main()
