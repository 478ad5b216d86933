"""The OpenAPI document of this server: FastAPI's, from the handlers' models, with what this deployment
refuses besides.

The models say what every deployment refuses (empty texts, token ids); a running server also refuses more texts
than --max-client-batch-size (413), a model it does not serve or of another task (404, 400), no `model` where
several could answer (400), and what its models do not declare: a Matryoshka size, a prompt name, an input type
no declared prompt serves, `normalize: false` for a graph that normalises, a token id beyond the vocabulary. Those
are written here into the document /openapi.json serves, so that a request the document allows is one the server
answers. The document lists the routes the served models' tasks answer (their union, where several are served)
and the routes of no one task; a route of a task not served here is left out (it still answers 424, naming what
is served).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel

from .catalog import Catalog, ServedModel
from .routes import routers
from .schemas import GRAPH_TEXT_PATTERN, TEXT_PATTERN
from .task_routes import task_routes

ANY_MODEL_PATHS = ("/tokenize", "/decode", "/info")  # routes of no one task: they read any model
DECODE_PATH = "/decode"


def mark(node: Any, chosen: Callable[[dict], bool], key: str, value: Any) -> None:
    """`key: value` on every schema node, however deep, that `chosen` picks."""
    if isinstance(node, dict):
        if chosen(node):
            node[key] = value
        for child in node.values():
            mark(child, chosen, key, value)
    elif isinstance(node, list):
        for child in node:
            mark(child, chosen, key, value)


def batch_bound(node: Any, limit: int) -> None:
    """`maxItems` on every list of texts (or pairs) a request carries: those are the arrays that declare
    `minItems: 1` and no bound of their own."""
    mark(node, lambda n: n.get("type") == "array" and n.get("minItems") == 1 and "maxItems" not in n, "maxItems",
         limit)


def request_components(paths: tuple[str, ...]) -> set[str]:
    """The component names of the request bodies these routes read, and of the objects they hold (a field such
    as `prompt_name` may sit one level down, in text-embeddings-inference's similarity `parameters`)."""
    bodies = [route.body_field.field_info.annotation for router in routers() for route in router.routes
              if isinstance(route, APIRoute) and route.path in paths and route.body_field is not None]
    held = [kind for body in bodies for field in body.model_fields.values()
            for kind in (field.annotation, *typing.get_args(field.annotation))
            if isinstance(kind, type) and issubclass(kind, BaseModel)]
    return {kind.__name__ for kind in (*bodies, *held)}


def named(models: tuple[ServedModel, ...]) -> dict:
    """`model` where these are served: one of their names, and required where there are several."""
    names = {"type": "string", "enum": [m.name for m in models]}
    return names if len(models) > 1 else {"anyOf": [names, {"type": "null"}]}


def enums(node: Any) -> list[list]:
    """Every `enum` list in a schema node, nested ones too."""
    if isinstance(node, dict):
        return ([node["enum"]] if "enum" in node else []) + [e for v in node.values() for e in enums(v)]
    if isinstance(node, list):
        return [e for v in node for e in enums(v)]
    return []


def within(accepted: dict, declared: dict) -> dict:
    """`accepted` less the enum values the field's own type does not take: two routes' fields of one name
    (`input_type`: Cohere's and NVIDIA NIM's) keep their own vocabularies."""
    own = {v for e in enums(declared) for v in e}
    if not own:
        return accepted

    def kept(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: [x for x in v if x in own] if k == "enum" else kept(v) for k, v in node.items()}
        return [kept(v) for v in node] if isinstance(node, list) else node

    return kept(accepted)


def narrow(component: dict, fields: dict[str, dict | None], name: str = "") -> None:
    """The component's fields as `fields` says, within the values their own types take (keeping their titles
    and defaults); a field without a null among its values and without a default becomes required. A key
    `Component.field` narrows that component's field alone: None there means the field is not served (left out
    of the document), and a schema without a null makes it required unless the field has a default."""
    properties = component["properties"]
    for key, accepted in fields.items():
        own, _, field = key.rpartition(".")
        if own and own != name:
            continue
        if field not in properties:
            continue
        if own and accepted is None:
            del properties[field]
            continue
        if (own and {"type": "null"} not in accepted.get("anyOf", ()) and accepted.get("type") != "null"
                and "default" not in properties[field]):
            properties[field] = {**accepted, "title": properties[field].get("title", field)}
            component.setdefault("required", []).append(field)
            continue
        kept = {k: properties[field][k] for k in ("default", "title") if k in properties[field]}
        properties[field] = {**within(accepted, properties[field]), **kept}
        if "anyOf" not in accepted and "default" not in kept:
            component.setdefault("required", []).append(field)


def graph_texts(node: Any) -> None:
    """Texts without a NUL character, where every model that reads them tokenizes in graphs."""
    mark(node, lambda n: n.get("pattern") == TEXT_PATTERN, "pattern", GRAPH_TEXT_PATTERN)


def served_document(app: FastAPI, catalog: Catalog, max_client_batch_size: int) -> Callable[[], dict]:
    """What replaces app.openapi: FastAPI's document, made once, with this deployment's refusals."""
    document = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = document()
        components = schema.get("components", {}).get("schemas", {})
        batch_bound(components, max_client_batch_size)
        by_component: dict[str, list[tuple[dict, tuple[ServedModel, ...]]]] = {}
        for routes in task_routes():
            served = catalog.of_task(routes.contract)
            if not served:
                continue  # the route answers 424, as documented
            accepted = routes.accepts(tuple(m.head for m in served)) if routes.accepts else {}
            if routes.uncut and all(m.cut_refusal for m in served):
                accepted = {**accepted, **routes.uncut}
            for name in request_components(routes.paths):
                by_component.setdefault(name, []).append((accepted, served))
        for name, narrowed in by_component.items():
            # A route several tasks serve (rerank: cross-encoders and late-interaction models) takes any of their
            # models, and a field narrowed only where every one of them narrows it alike.
            first, *others = (accepted for accepted, _ in narrowed)
            common = {field: schema for field, schema in first.items()
                      if all(field in o and o[field] == schema for o in others)}
            narrow(components[name], {**common, "model": named(tuple(m for _, served in narrowed for m in served))},
                   name)
            if all(m.tokenizes_in_graph for _, served in narrowed for m in served):
                graph_texts(components[name])
        batch_bound(components, max_client_batch_size)  # the lists the narrowing wrote, too
        answered = {p for routes in task_routes() if catalog.of_task(routes.contract) for p in routes.paths}
        for path in {p for routes in task_routes() for p in routes.paths} - answered:
            schema["paths"].pop(path, None)
        any_model(schema, components, catalog)
        return schema

    return openapi


def any_model(schema: dict, components: dict, catalog: Catalog) -> None:
    """The routes that read any model's tokenizer: the prompt names every model declares, token ids within the
    largest vocabulary, and, with several models, which one (`model` required)."""
    if not catalog.models:
        return
    for name in request_components(("/tokenize",)):
        common = set.intersection(*(set(m.prompts) for m in catalog.models))
        narrow(components[name], {"prompt_name": {"anyOf": [{"type": "string", "enum": ["", *sorted(common)]},
                                                             {"type": "null"}],
                                                   "description": "a prompt every served model declares"}})
    vocabulary = max(vocabulary_size(m) for m in catalog.models)
    for name in request_components((DECODE_PATH,)):
        within_vocabulary(components[name]["properties"]["ids"], vocabulary - 1)
    if len(catalog.models) > 1:  # which model's tokenizer: `model` must say
        for name in request_components(ANY_MODEL_PATHS):
            narrow(components[name], {"model": named(catalog.models)})
        for operation in (op for path in ANY_MODEL_PATHS for op in schema["paths"].get(path, {}).values()):
            for parameter in operation.get("parameters", ()):
                if parameter["name"] == "model":
                    parameter.update(required=True, schema=named(catalog.models))


def vocabulary_size(model: ServedModel) -> int:
    """The ids the served tokenizer file decodes: its vocabulary, added tokens included."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model.tokenizer_file)).get_vocab_size(with_added_tokens=True)


def within_vocabulary(node: Any, largest: int) -> None:
    """`maximum` on every token id a schema node holds (the integers that declare `minimum: 0`)."""
    mark(node, lambda n: n.get("type") == "integer" and n.get("minimum") == 0, "maximum", largest)
