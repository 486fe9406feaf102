package example;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Threads started at init: a pool of 4 and a scheduler ticking every 5 ms.
 * Each call runs 16 tasks on the pool and waits for the ticker to move.
 */
public class Pool {
    private final ExecutorService pool = Executors.newFixedThreadPool(4);
    private final ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor();
    private final AtomicLong ticks = new AtomicLong();

    public Pool() throws Exception {
        ticker.scheduleAtFixedRate(ticks::incrementAndGet, 0, 5, TimeUnit.MILLISECONDS);
        work(4);
    }

    private long work(int n) throws Exception {
        List<Future<Long>> fs = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            final long k = i;
            fs.add(pool.submit(() -> {
                long s = 0;
                for (long j = 0; j <= 1000 * k; j++) {
                    s += j;
                }
                return s;
            }));
        }
        long sum = 0;
        for (Future<Long> f : fs) {
            sum += f.get(10, TimeUnit.SECONDS);
        }
        return sum;
    }

    public Map<String, Object> handle(Map<String, Object> event) throws Exception {
        long sum = work(16);
        long before = ticks.get();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (ticks.get() < before + 3 && System.nanoTime() < deadline) {
            Thread.sleep(1);
        }
        return Map.of("sum", sum, "ticked", ticks.get() - before,
                "threads", Thread.activeCount());
    }
}
