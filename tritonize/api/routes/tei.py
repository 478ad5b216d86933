"""text-embeddings-inference's routes that several tasks share (/rerank) or that read any model (/tokenize, /decode,
/info), in its shapes and error envelope; its task routes (/embed, /similarity, /embed_sparse, /predict, /embed_all)
are the tasks' own (tasks/<task>/api.py)."""

from __future__ import annotations

from fastapi import Query, Request

from .. import schemas as s
from ..errors import invalid
from ..state import noted, state_of
from .families import TEI, Router
from .inference import ranked, ranking, refuse_truncated, scores
from .parameters import prompt_of, right_only, texts_of
from .responses import GUARDED, INFERS, answered, documented

router = Router(TEI)


@router.post("/rerank", responses=documented(s.TEIError, INFERS))
@answered
async def tei_rerank(body: s.TEIRerankRequest, request: Request) -> s.TEIRanks:
    state = state_of(request)
    model = state.catalog.find(ranking(), body.model)
    right_only(body.truncation_direction)
    query = texts_of(body.query, "query", 1)[0]
    docs = texts_of(body.texts, "texts", state.settings.max_client_batch_size)
    values, answer = await scores(state, request, model, query, docs, raw=body.raw_scores)
    refuse_truncated(answer, body.truncate, model)
    return s.TEIRanks.model_construct([
        s.TEIRank.model_construct(index=i, score=float(values[i]), **({"text": docs[i]} if body.return_text else {}))
        for i in ranked(values, None)])


@router.post("/tokenize", responses=documented(s.TEIError, (*GUARDED, 400, 404, 422)))
@answered
async def tei_tokenize(body: s.TEITokenizeRequest, request: Request) -> s.TEITokens:
    state = state_of(request)
    model = state.catalog.find_any(body.model)
    noted(request)["model"] = model.name
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    prompt = prompt_of(model, body.prompt_name) if body.prompt_name else ""
    tokenizer = state.tokenizer(model)
    out = []
    for text in texts:
        text = prompt + text
        enc = tokenizer.encode(text, add_special_tokens=body.add_special_tokens)
        out.append([
            s.TEIToken.model_construct(id=i, text=tok, special=True, start=None, stop=None) if special else
            s.TEIToken.model_construct(id=i, text=text[a:b], special=False, start=a, stop=b)
            for i, tok, special, (a, b) in zip(enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets)])
    return s.TEITokens.model_construct(out)


@router.post("/decode", responses={**documented(s.TEIError, (*GUARDED, 400, 404, 422)), 422: {
    "model": s.TEIError, "description": "The body does not fit the schema, or an id is beyond the model's vocabulary "
                                        "(the schema's `maximum` is the largest served vocabulary's; with several "
                                        "models, a smaller one's is refused here)"}})
@answered
async def tei_decode(body: s.TEIDecodeRequest, request: Request) -> s.TEIDecoded:
    """Token ids back to text with the served tokenizer file, as text-embeddings-inference decodes them; an id
    the vocabulary does not hold is refused (the tokenizer would drop it silently)."""
    state = state_of(request)
    model = state.catalog.find_any(body.model)
    noted(request)["model"] = model.name
    rows = body.ids if body.ids and isinstance(body.ids[0], list) else [body.ids]
    if len(rows) > state.settings.max_client_batch_size:
        raise invalid(f"`ids` holds {len(rows)} lists, over this server's limit of "
                      f"{state.settings.max_client_batch_size} per request (--max-client-batch-size)", "ids", 413)
    tokenizer = state.tokenizer(model)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    unknown = sorted({i for row in rows for i in row if i >= size})
    if unknown:
        raise invalid(f"ids {unknown[:5]} are not in {model.name}'s vocabulary ({size} tokens: ids 0 to {size - 1})",
                      "ids")
    return s.TEIDecoded.model_construct(tokenizer.decode_batch(rows, skip_special_tokens=body.skip_special_tokens))


@router.get("/info", responses=documented(s.TEIError, (*GUARDED, 400, 404)))
@answered
async def tei_info(request: Request, model: str | None = Query(None)) -> s.TEIInfo:
    state = state_of(request)
    return state.info(state.catalog.find_any(model))
