#!/usr/bin/env bash
# Send raw strings with curl, using the plain JSON body of Triton's HTTP/REST
# (KServe v2) protocol: no binary tensor extension, no client library.
#
#   clients/curl.sh "first text" "second text"
#   echo "a text" | clients/curl.sh
#   TOP_K=2 clients/curl.sh "great movie"          # classifiers: top-k labels
#   QUERY="what is triton?" clients/curl.sh "doc one" "doc two"   # rerankers: one logit per document
#   QUESTION="who lives in Berlin?" clients/curl.sh "Sarah lives in Berlin."   # extractive QA: one answer per context
#   FORM=query clients/curl.sh "what is triton?"   # late interaction (ColBERT): each text's vectors, as a query or document
#
# Environment: TRITON_HTTP_URL or TRITON_URL (default http://127.0.0.1:8000),
# TRITON_MODEL or MODEL (default: the only model in ${TRITON_REPO:-triton_repo}/tritonize.yaml), TOP_K, QUERY, QUESTION,
# FORM.
set -euo pipefail

URL="${TRITON_HTTP_URL:-${TRITON_URL:-http://127.0.0.1:8000}}"
case "$URL" in http://* | https://*) ;; *) URL="http://$URL" ;; esac
MODEL="${TRITON_MODEL:-${MODEL:-}}"
if [[ -z "$MODEL" ]]; then
  manifest="${TRITON_REPO:-triton_repo}/tritonize.yaml"
  # One model: its entry is the whole file (`name:` at the top level). Several: each entry's `name:` is indented.
  [[ -f "$manifest" ]] && MODEL="$(sed -n 's/^name:[[:space:]]*//p' "$manifest" | head -n1 | tr -d "\"'")"
  if [[ -z "$MODEL" && -f "$manifest" ]] && grep -q '^models:' "$manifest"; then
    names="$(sed -n 's/^[-[:space:]]\{1,\}name:[[:space:]]*//p' "$manifest" | tr -d "\"'" | paste -sd, -)"
    echo "error: ${manifest} lists several models (${names}): set TRITON_MODEL to one of them" >&2
    exit 2
  fi
fi
if [[ -z "$MODEL" ]]; then
  echo "error: set TRITON_MODEL (no ${TRITON_REPO:-triton_repo}/tritonize.yaml to read the name from)" >&2
  exit 2
fi

# JSON string escaping in plain bash: backslash, quote, then every control character.
json_string() {
  local s="$1" code hex ch
  s="${s//\\/\\\\}"
  s="${s//\"/\\\"}"
  s="${s//$'\n'/\\n}"
  s="${s//$'\r'/\\r}"
  s="${s//$'\t'/\\t}"
  for code in $(seq 1 31); do
    printf -v hex '%02x' "$code"
    printf -v ch "\\x${hex}"
    [[ "$s" == *"$ch"* ]] && s="${s//"$ch"/$(printf '\\u%04x' "$code")}"
  done
  printf '"%s"' "$s"
}

texts=("$@")
if [[ ${#texts[@]} -eq 0 ]]; then
  mapfile -t texts
fi
if [[ ${#texts[@]} -eq 0 ]]; then
  echo "error: no texts (pass them as arguments or on stdin)" >&2
  exit 2
fi

data=""
for t in "${texts[@]}"; do
  data+="${data:+,}$(json_string "$t")"
done
outputs=""
if [[ -n "${TOP_K:-}" ]]; then
  outputs=",\"outputs\":[{\"name\":\"probabilities\",\"parameters\":{\"classification\":${TOP_K}}}]"
fi
# A reranker takes (QUERY, TEXT) pairs, a QA model (QUESTION, CONTEXT): the first is repeated for every text.
text_name=TEXT first_name="" first=""
if [[ -n "${QUERY:-}" ]]; then first_name=QUERY first="$QUERY"; fi
if [[ -n "${QUESTION:-}" ]]; then first_name=QUESTION first="$QUESTION" text_name=CONTEXT; fi
inputs="{\"name\":\"${text_name}\",\"shape\":[${#texts[@]},1],\"datatype\":\"BYTES\",\"data\":[${data}]}"
if [[ -n "$first_name" ]]; then
  repeated="" one="$(json_string "$first")"
  for _ in "${texts[@]}"; do repeated+="${repeated:+,}${one}"; done
  inputs="{\"name\":\"${first_name}\",\"shape\":[${#texts[@]},1],\"datatype\":\"BYTES\",\"data\":[${repeated}]},${inputs}"
fi
# A late-interaction model takes each text's form (query or document) beside it.
if [[ -n "${FORM:-}" ]]; then
  forms="" one="$(json_string "$FORM")"
  for _ in "${texts[@]}"; do forms+="${forms:+,}${one}"; done
  inputs+=",{\"name\":\"FORM\",\"shape\":[${#texts[@]},1],\"datatype\":\"BYTES\",\"data\":[${forms}]}"
fi
body="{\"inputs\":[${inputs}]${outputs}}"

# --fail-with-body: a non-2xx answer exits non-zero and still prints Triton's {"error": ...}.
status=0
curl -sS --fail-with-body -X POST "${URL%/}/v2/models/${MODEL}/infer" \
  -H 'Content-Type: application/json' --data-binary @- <<<"$body" || status=$?
echo
exit "$status"
