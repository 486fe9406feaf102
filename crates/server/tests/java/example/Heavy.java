package example;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * What a restored JVM must still do: a full collection, 200 MB allocated
 * and dropped, and null pointers caught in compiled code (HotSpot's implicit
 * null checks are SIGSEGVs its handler turns into exceptions).
 */
public class Heavy {
    private static int length(String s) {
        return s.length();
    }

    public Map<String, Object> handleRequest(Map<String, Object> event) {
        System.gc();
        List<byte[]> keep = new ArrayList<>();
        long sum = 0;
        for (int i = 0; i < 200; i++) {
            byte[] b = new byte[1 << 20];
            b[i] = (byte) i;
            keep.add(b);
            sum += b[i];
        }
        int caught = 0;
        long len = 0;
        for (int i = 0; i < 200_000; i++) {
            try {
                len += length(i % 1000 == 0 ? null : "abc");
            } catch (NullPointerException e) {
                caught++;
            }
        }
        keep.clear();
        System.gc();
        return Map.of("allocated_mb", 200, "sum", sum, "caught", caught, "len", len);
    }
}
