"""TEST ONLY (a benchmark's): helloworld from a process holding a
multiprocessing ThreadPool(4) made at init: 7 more threads and the POSIX
semaphores of its queues' locks (deleted /dev/shm files mapped shared), what a
thread pool adds to a restore beside idle_threads_1 and idle_threads_8."""
import multiprocessing.pool
import threading

POOL = None


def init():
    global POOL
    POOL = multiprocessing.pool.ThreadPool(4)


def handler(event):
    name = event.get("name", "World")
    return {"message": "Hello, %s!" % name, "length": len(name), "threads": threading.active_count()}
