// TEST ONLY: signal listeners added at module load (process.on), which a
// restored instance must still run: the handler sends each signal to its own
// process and waits (2 s at most) for every listener to have run once.
const counts = { SIGUSR1: 0, SIGUSR2: 0, SIGTERM: 0 };
for (const s of Object.keys(counts)) {
  process.on(s, () => {
    counts[s] += 1;
  });
}

exports.handler = async () => {
  for (const s of Object.keys(counts)) process.kill(process.pid, s);
  const t0 = Date.now();
  while (Object.values(counts).some((n) => n === 0) && Date.now() - t0 < 2000) {
    await new Promise((r) => setTimeout(r, 5));
  }
  return { counts, ok: Object.values(counts).every((n) => n === 1) };
};
