#!/bin/bash
# does nft's ct count still count a connection that closed within the same jiffy?
set -e
ip netns add ccq 2>/dev/null || true
ip netns exec ccq ip link set lo up
ip netns exec ccq nft -f - <<'NFT'
table inet t {
  set s { type ipv4_addr; flags dynamic; }
  chain out { type filter hook output priority 0;
    tcp dport 9999 ct state new add @s { ip daddr ct count over 1 } reject with tcp reset
  }
}
NFT
ip netns exec ccq python3 - <<'PY'
import socket, threading, time
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 9999)); srv.listen(64)
def serve():
    while True:
        c, _ = srv.accept(); c.recv(1); c.close()
threading.Thread(target=serve, daemon=True).start()
def once(pause):
    a = socket.create_connection(("127.0.0.1", 9999)); a.close()   # client closes first
    time.sleep(0.002)   # let the close finish (FIN/ACK both ways on loopback)
    if pause: time.sleep(pause)
    try:
        b = socket.create_connection(("127.0.0.1", 9999)); b.close(); return 0
    except ConnectionRefusedError:
        return 1
    finally:
        time.sleep(0.02)
for pause in (0, 0.010):
    refused = sum(once(pause) for _ in range(200))
    print(f"pause {pause*1000:.0f} ms before the second connection: refused {refused}/200")
PY
ip netns del ccq
