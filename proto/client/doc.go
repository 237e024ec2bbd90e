// Package client is the Go SDK for Sundial, a distributed delayed-message
// queue. A Client talks gRPC to one or more sundial-proxy addresses
// (round-robin, plaintext unless WithTransportCredentials says otherwise).
//
// What it owns:
//   - Publish: a synchronous, idempotent batch publish. Every call gets one
//     random request id that is reused on every retry, so the server stores a
//     retried batch once.
//   - Publisher: asynchronous batched publishing. Messages are gathered into
//     batches (by count, bytes and linger time) and sent as concurrent Publish
//     calls; each message's result is routed to its PublishFuture.
//   - Subscribe: a credit-based delivery stream that reconnects with
//     exponential backoff and runs a handler per Delivery, at most
//     MaxInFlight at a time. Deliveries are acked, nacked or extended over
//     the stream (falling back to the unary calls once the stream is gone).
//   - Cancel, RescheduleIn and RescheduleAt change a pending message found
//     by key or id (ByKey, ByID) and answer a definite outcome; they carry
//     a request id (new per call, or WithRequestID's) and are retried with
//     it like Publish, so a retry answers the first attempt's outcome.
//   - Receive is the pull API: up to MaxMessages deliveries after a long
//     poll of at most Wait, answered with the unary Ack, Nack and Extend.
//   - Admin and Cluster expose the raw generated clients.
//
// Goroutines: a Client starts none of its own (gRPC owns its connections).
// A Publisher owns one batching goroutine plus one goroutine per batch in
// flight; all end in Close. Subscribe owns a receive loop and one goroutine
// per running handler; it returns only after every handler returned.
//
// Usage:
//
//	c, err := client.Dial(ctx, []string{"127.0.0.1:7400"})
//	if err != nil { ... }
//	defer c.Close()
//	res, err := c.Publish(ctx, &sundialv1.Message{Topic: "emails", Payload: []byte("hi"), DelayMs: 5000})
//	...
//	err = c.Subscribe(ctx, client.SubscribeOptions{Topic: "emails"},
//		func(ctx context.Context, d *client.Delivery) {
//			send(d.Payload)
//			_ = d.Ack(ctx)
//		})
package client
