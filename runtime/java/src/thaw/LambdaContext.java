package thaw;

import com.amazonaws.services.lambda.runtime.ClientContext;
import com.amazonaws.services.lambda.runtime.CognitoIdentity;
import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.LambdaLogger;
import java.nio.charset.StandardCharsets;

/**
 * Lambda's Context for one invocation. The fixed fields come from the
 * environment the daemon sets for a deployed function; the request id and the
 * deadline are the invocation's. The logger writes to the instance's log
 * (stdout), as Lambda's does.
 */
final class LambdaContext implements Context {
    private static final LambdaLogger LOGGER = new LambdaLogger() {
        @Override
        public void log(String message) {
            System.out.print(message);
            System.out.flush();
        }

        @Override
        public void log(byte[] message) {
            log(new String(message, StandardCharsets.UTF_8));
        }
    };

    private final String requestId;
    private final long deadlineNanos;
    private final String functionName;

    LambdaContext(String requestId, long deadlineNanos, String suiteName) {
        this.requestId = requestId;
        this.deadlineNanos = deadlineNanos;
        this.functionName = env("THAW_FUNCTION_NAME", suiteName);
    }

    private static String env(String name, String otherwise) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? otherwise : v;
    }

    @Override
    public String getAwsRequestId() {
        return requestId;
    }

    @Override
    public String getLogGroupName() {
        return "/thaw/functions/" + functionName;
    }

    @Override
    public String getLogStreamName() {
        return env("THAW_INSTANCE_ID", "fresh");
    }

    @Override
    public String getFunctionName() {
        return functionName;
    }

    @Override
    public String getFunctionVersion() {
        return env("THAW_FUNCTION_VERSION", "$LATEST");
    }

    @Override
    public String getInvokedFunctionArn() {
        return "arn:thaw:lambda:local:" + env("THAW_FUNCTION_OWNER", "default")
                + ":function:" + functionName;
    }

    @Override
    public CognitoIdentity getIdentity() {
        return null;
    }

    @Override
    public ClientContext getClientContext() {
        return null;
    }

    @Override
    public int getRemainingTimeInMillis() {
        if (deadlineNanos == Long.MAX_VALUE) {
            return Integer.MAX_VALUE;
        }
        long left = (deadlineNanos - System.nanoTime()) / 1_000_000L;
        return (int) Math.max(0, Math.min(Integer.MAX_VALUE, left));
    }

    @Override
    public int getMemoryLimitInMB() {
        String v = env("THAW_FUNCTION_MEMORY_MB", env("THAW_MEMORY_MB", "0"));
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            return 0;
        }
    }

    @Override
    public LambdaLogger getLogger() {
        return LOGGER;
    }
}
