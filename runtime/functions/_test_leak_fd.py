"""TEST ONLY: keeps a file open after returning, so prepare_checkpoint must refuse."""
_files = []


def handler(event):
    _files.append(open("/opt/thaw/agent.py", "rb"))
    return {"open": len(_files)}
