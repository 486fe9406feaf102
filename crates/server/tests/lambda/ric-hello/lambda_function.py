"""The Go and Rust hello worlds' answer, from Python under awslambdaric."""
import time

init_at = time.time_ns()
calls = 0


def handler(event, context):
    global calls
    calls += 1
    return {"hello": event["name"], "calls": calls, "init_at": init_at,
            "request_id": context.aws_request_id, "arn": context.invoked_function_arn}
