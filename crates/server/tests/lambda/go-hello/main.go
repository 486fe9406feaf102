// A Lambda function in Go, as its authors write it: aws-lambda-go's
// lambda.Start, state made at init, a panic on request.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-lambda-go/lambda"
)

type event struct {
	Name  string `json:"name"`
	Panic bool   `json:"panic"`
}

var initAt = time.Now().UnixNano()
var calls = 0

func handler(ctx context.Context, e event) (map[string]interface{}, error) {
	if e.Panic {
		panic("asked to panic: " + e.Name)
	}
	calls++
	lc, _ := lambdacontext.FromContext(ctx)
	deadline, _ := ctx.Deadline()
	return map[string]interface{}{
		"hello":      e.Name,
		"calls":      calls,
		"init_at":    initAt,
		"request_id": lc.AwsRequestID,
		"arn":        lc.InvokedFunctionArn,
		"deadline":   deadline.UnixMilli() > time.Now().UnixMilli(),
		"function":   lambdacontext.FunctionName,
	}, nil
}

func main() {
	if msg := os.Getenv("HELLO_FAIL_INIT"); msg != "" {
		log.Fatalf("init failed: %s", msg)
	}
	lambda.Start(handler)
}
