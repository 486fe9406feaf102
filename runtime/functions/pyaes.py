"""pyaes: AES-256 in CTR mode over a text message with the pure-Python pyaes
library (FunctionBench `pyaes`; TOSS: 64..4096 characters)."""
import hashlib

import pyaes


def handler(event):
    message = event["message"].encode("utf-8")
    key = bytes.fromhex(event["key_hex"])
    iterations = int(event.get("iterations", 1))
    ciphertext = b""
    for _ in range(iterations):
        aes = pyaes.AESModeOfOperationCTR(key)
        ciphertext = aes.encrypt(message)
    plaintext = pyaes.AESModeOfOperationCTR(key).decrypt(ciphertext)
    return {
        "length": len(ciphertext),
        "iterations": iterations,
        "ciphertext_sha256": hashlib.sha256(ciphertext).hexdigest(),
        "ciphertext_head_hex": ciphertext[:32].hex(),
        "roundtrip_ok": plaintext == message,
    }
