"""helloworld: no actual work (FunctionBench/vHive reference function)."""


def handler(event):
    name = event.get("name", "World")
    return {"message": "Hello, %s!" % name, "length": len(name)}
