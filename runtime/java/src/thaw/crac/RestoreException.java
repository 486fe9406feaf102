package thaw.crac;

/** An after-restore hook failed; the hooks' exceptions are suppressed here. */
public class RestoreException extends Exception {
    private static final long serialVersionUID = 1L;

    public RestoreException() {}

    public RestoreException(String message) {
        super(message);
    }
}
