package thaw.crac;

/** CRaC's resource as org.crac's compatibility layer looks it up by name. */
public interface Resource {
    void beforeCheckpoint(Context<? extends Resource> context) throws Exception;

    void afterRestore(Context<? extends Resource> context) throws Exception;
}
