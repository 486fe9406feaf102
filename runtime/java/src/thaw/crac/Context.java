package thaw.crac;

/** CRaC's context: a resource that notifies the resources registered with it. */
public abstract class Context<R extends Resource> implements Resource {
    protected Context() {}

    public abstract void register(R resource);
}
