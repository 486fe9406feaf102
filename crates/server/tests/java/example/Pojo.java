package example;

import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.RequestHandler;
import java.util.List;

/** A RequestHandler with Jackson-bound classes; reports the context's fields. */
public class Pojo implements RequestHandler<Pojo.Order, Pojo.Receipt> {
    public static class Order {
        public String customer;
        public List<Integer> items;
    }

    public static class Receipt {
        public String customer;
        public int total;
        public String requestId;
        public String functionName;
        public int remainingMs;
        public int memoryMb;
        public String uuid;
        public double random;
    }

    @Override
    public Receipt handleRequest(Order order, Context context) {
        Receipt r = new Receipt();
        r.customer = order.customer;
        r.total = order.items == null ? 0 : order.items.stream().mapToInt(Integer::intValue).sum();
        r.requestId = context.getAwsRequestId();
        r.functionName = context.getFunctionName();
        r.remainingMs = context.getRemainingTimeInMillis();
        r.memoryMb = context.getMemoryLimitInMB();
        r.uuid = java.util.UUID.randomUUID().toString();
        r.random = Math.random();
        context.getLogger().log("receipt for " + r.customer + "\n");
        return r;
    }
}
