package thaw;

import java.lang.reflect.Field;
import java.nio.ByteBuffer;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Re-seeds the JDK's generators in a restored clone from the 32 bytes the
 * worker gives it, so clones of one snapshot never draw the same numbers:
 * `Math.random`'s generator, the seed uniquifier `new Random()` mixes with
 * the clock, `ThreadLocalRandom` (its seeder, and every thread's state
 * dropped so that each seeds itself again on next use), and SecureRandom:
 * UUID.randomUUID's gets the seed mixed in (`setSeed` adds to, never
 * replaces, a SecureRandom's state; NativePRNG's state is shared by all its
 * instances, and each draw also mixes in fresh bytes of /dev/urandom). The agent
 * runs with `--add-opens java.base/java.lang,java.util,java.util.concurrent`
 * for the private fields.
 */
final class Reseed {
    private Reseed() {}

    static List<String> all(byte[] seed) throws ReflectiveOperationException {
        ByteBuffer b = ByteBuffer.wrap(seed);
        long a = b.getLong(), c = b.getLong(), d = b.getLong(), e = b.getLong();
        List<String> done = new ArrayList<>();

        Random math = (Random) staticField("java.lang.Math$RandomNumberGeneratorHolder",
                "randomNumberGenerator");
        math.setSeed(a);
        done.add("Math.random");

        ((AtomicLong) staticField("java.util.Random", "seedUniquifier")).set(c);
        done.add("Random");

        ((AtomicLong) staticField("java.util.concurrent.ThreadLocalRandom", "seeder")).set(d ^ e);
        Field probe = Thread.class.getDeclaredField("threadLocalRandomProbe");
        probe.setAccessible(true);
        Thread[] threads = new Thread[Thread.activeCount() + 16];
        int n = Thread.enumerate(threads);
        for (int i = 0; i < n; i++) {
            probe.setInt(threads[i], 0);
        }
        // this thread's generator seeds itself again now, from the new seeder
        ThreadLocalRandom.current();
        done.add("ThreadLocalRandom");

        // NativePRNG, Linux's default, keeps one state for all its instances:
        // seeding UUID's seeds every `new SecureRandom()` too
        Object holder = staticField("java.util.UUID$Holder", "numberGenerator");
        if (holder instanceof SecureRandom) {
            ((SecureRandom) holder).setSeed(seed);
        }
        done.add("SecureRandom");
        return done;
    }

    private static Object staticField(String cls, String name)
            throws ReflectiveOperationException {
        Field f = Class.forName(cls).getDeclaredField(name);
        f.setAccessible(true);
        return f.get(null);
    }
}
