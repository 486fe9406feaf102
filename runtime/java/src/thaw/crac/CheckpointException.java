package thaw.crac;

/** A before-checkpoint hook failed; the hooks' exceptions are suppressed here. */
public class CheckpointException extends Exception {
    private static final long serialVersionUID = 1L;

    public CheckpointException() {}

    public CheckpointException(String message) {
        super(message);
    }
}
