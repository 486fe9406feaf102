package thaw;

import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.lang.reflect.Field;

/**
 * The agent's end of the protocol's one socket, fd 3: frames of a 4-byte
 * little-endian length and that many bytes of UTF-8 JSON. Reads are plain
 * blocking read(2)s on fd 3 from the agent's thread, so between requests
 * that thread sits where a checkpoint freezes it and a restore resumes it
 * (on a new socket at the same number).
 */
final class Channel {
    static final int FD = 3;
    private static final int DISCARD_CHUNK = 1 << 20;

    private final FileInputStream in;
    private final FileOutputStream out;
    private final long maxRequest;

    Channel(long maxRequest) throws ReflectiveOperationException {
        FileDescriptor fd = descriptor(FD);
        this.in = new FileInputStream(fd);
        this.out = new FileOutputStream(fd);
        this.maxRequest = maxRequest;
    }

    /**
     * A FileDescriptor for an inherited number: java.io keeps the number
     * private (the agent runs with `--add-opens java.base/java.io`).
     */
    private static FileDescriptor descriptor(int n) throws ReflectiveOperationException {
        FileDescriptor d = new FileDescriptor();
        Field f = FileDescriptor.class.getDeclaredField("fd");
        f.setAccessible(true);
        f.setInt(d, n);
        return d;
    }

    /** A frame too long to read: its body was read and dropped. */
    static final class TooLong extends Exception {
        private static final long serialVersionUID = 1L;

        TooLong(String message) {
            super(message);
        }
    }

    /** The next frame's body; null on a clean end of the stream. */
    byte[] receive() throws IOException, TooLong {
        byte[] head = readExact(4, true);
        if (head == null) {
            return null;
        }
        long n = (head[0] & 0xffL)
                | (head[1] & 0xffL) << 8
                | (head[2] & 0xffL) << 16
                | (head[3] & 0xffL) << 24;
        if (n > maxRequest) {
            // the length is explicit, so the stream stays in sync: drop the body
            long left = n;
            while (left > 0) {
                int chunk = (int) Math.min(left, DISCARD_CHUNK);
                readExact(chunk, false);
                left -= chunk;
            }
            throw new TooLong(
                    "request of " + n + " bytes exceeds the limit of " + maxRequest + " bytes");
        }
        return readExact((int) n, false);
    }

    private byte[] readExact(int n, boolean eofOk) throws IOException {
        byte[] buf = new byte[n];
        int got = 0;
        while (got < n) {
            int k = in.read(buf, got, n - got);
            if (k < 0) {
                if (got == 0 && eofOk) {
                    return null;
                }
                throw new EOFException("connection closed mid-message");
            }
            got += k;
        }
        return buf;
    }

    /** One frame, written whole. */
    void send(byte[] body) throws IOException {
        byte[] msg = new byte[4 + body.length];
        int n = body.length;
        msg[0] = (byte) n;
        msg[1] = (byte) (n >>> 8);
        msg[2] = (byte) (n >>> 16);
        msg[3] = (byte) (n >>> 24);
        System.arraycopy(body, 0, msg, 4, n);
        out.write(msg);
    }
}
