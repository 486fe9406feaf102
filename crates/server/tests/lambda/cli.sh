#!/usr/bin/env bash
# Lambda's API through the AWS CLI v1 (`aws lambda ... --endpoint-url`), on a
# Node.js function: create from a zip, invoke with the log tail, a function
# error, list, update configuration, publish, alias, invoke by alias, delete.
# Every answer is checked; prints "ok" last.
# Environment: THAW_ENDPOINT, AWS_* (as roundtrip.py), AWS_CLI (the aws binary),
# PYTHON (the venv's python, for building the zip and reading JSON).
set -euo pipefail
E=(--endpoint-url "$THAW_ENDPOINT")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }
# field FILE EXPR: a Python expression over the JSON in FILE (as `j`)
field() { "$PYTHON" -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }

cat >index.js <<'JS'
let count = 0;
exports.handler = async (event, context) => {
  count += 1;
  console.log("node saw", JSON.stringify(event));
  if (event.fail) { throw new TypeError("node failed: " + event.fail); }
  return { hello: event.name || "world", count, fn: context.functionName, env: process.env.COLOUR || null };
};
JS
"$PYTHON" -c 'import zipfile; z=zipfile.ZipFile("fn.zip","w"); z.write("index.js"); z.close()'

"$AWS_CLI" lambda create-function "${E[@]}" --function-name cli-node --runtime nodejs20.x \
    --handler index.handler --role arn:aws:iam::123456789012:role/r --zip-file fileb://fn.zip \
    --environment 'Variables={COLOUR=blue}' >create.json
[ "$(field create.json 'j["Runtime"], j["Handler"], j["Version"]')" = "('nodejs20.x', 'index.handler', '\$LATEST')" ] \
    || fail "create-function answer: $(cat create.json)"

"$AWS_CLI" lambda invoke "${E[@]}" --function-name cli-node \
    --payload '{"name": "cli"}' --log-type Tail out.json >meta.json
[ "$(field out.json 'j["hello"], j["env"], j["fn"]')" = "('cli', 'blue', 'cli-node')" ] || fail "invoke payload: $(cat out.json)"
[ "$(field meta.json 'j["StatusCode"], j["ExecutedVersion"]')" = "(200, '\$LATEST')" ] || fail "invoke answer: $(cat meta.json)"
log=$(field meta.json '__import__("base64").b64decode(j["LogResult"]).decode()')
[[ $log == *'node saw {"name":"cli"}'* && $log == *"REPORT RequestId"* ]] || fail "log tail: $log"

"$AWS_CLI" lambda invoke "${E[@]}" --function-name cli-node \
    --payload '{"fail": "on purpose"}' err.json >meta.json
[ "$(field meta.json 'j["FunctionError"]')" = "Unhandled" ] || fail "function error header: $(cat meta.json)"
[ "$(field err.json 'j["errorType"], "on purpose" in j["errorMessage"]')" = "('TypeError', True)" ] \
    || fail "function error payload: $(cat err.json)"

"$AWS_CLI" lambda list-functions "${E[@]}" --max-items 10 >list.json
[ "$(field list.json '[f["FunctionName"] for f in j["Functions"]]')" = "['cli-node']" ] || fail "list: $(cat list.json)"

"$AWS_CLI" lambda update-function-configuration "${E[@]}" --function-name cli-node --timeout 7 \
    --environment 'Variables={COLOUR=green}' >conf.json
[ "$(field conf.json 'j["Timeout"], j["Environment"]["Variables"]')" = "(7, {'COLOUR': 'green'})" ] \
    || fail "update configuration: $(cat conf.json)"

"$AWS_CLI" lambda publish-version "${E[@]}" --function-name cli-node >pub.json
[ "$(field pub.json 'j["Version"]')" = "1" ] || fail "publish-version: $(cat pub.json)"
"$AWS_CLI" lambda create-alias "${E[@]}" --function-name cli-node --name prod --function-version 1 >alias.json
[ "$(field alias.json 'j["FunctionVersion"]')" = "1" ] || fail "create-alias: $(cat alias.json)"
"$AWS_CLI" lambda update-function-configuration "${E[@]}" --function-name cli-node \
    --environment 'Variables={COLOUR=red}' >/dev/null
"$AWS_CLI" lambda invoke "${E[@]}" --function-name cli-node --qualifier prod \
    --payload '{}' out.json >meta.json
[ "$(field out.json 'j["env"]'):$(field meta.json 'j["ExecutedVersion"]')" = "green:1" ] \
    || fail "invoke by alias: $(cat out.json) $(cat meta.json)"
"$AWS_CLI" lambda invoke "${E[@]}" --function-name cli-node \
    --payload '{}' out.json >/dev/null
[ "$(field out.json 'j["env"]')" = "red" ] || fail "\$LATEST after the alias: $(cat out.json)"

"$AWS_CLI" lambda delete-function "${E[@]}" --function-name cli-node
if "$AWS_CLI" lambda get-function "${E[@]}" --function-name cli-node >/dev/null 2>err.txt; then
    fail "get-function after delete-function succeeded"
fi
grep -q ResourceNotFoundException err.txt || fail "get-function after delete: $(cat err.txt)"
echo ok
