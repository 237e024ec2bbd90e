package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, []string{client.DefaultAddr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Deliver "hello" in five seconds.
	res, err := c.Publish(ctx, &sundialv1.Message{Topic: "greetings", Payload: []byte("hello"), DelayMs: 5000})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.StatusError(res[0].GetError()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("published", res[0].GetMessageId())

	// Many messages: batch them asynchronously.
	pub := c.NewPublisher(client.PublisherOptions{Linger: 5 * time.Millisecond})
	f := pub.Publish(&sundialv1.Message{Topic: "greetings", Payload: []byte("again")})
	if err := pub.Close(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := f.Wait(ctx); err != nil {
		log.Fatal(err)
	}

	// Consume until ctx ends.
	err = c.Subscribe(ctx, client.SubscribeOptions{Topic: "greetings", MaxInFlight: 16},
		func(ctx context.Context, d *client.Delivery) {
			fmt.Printf("%s %s\n", d.MessageId, d.Payload)
			if err := d.Ack(ctx); err != nil {
				log.Print(err)
			}
		})
	if err != nil {
		log.Fatal(err)
	}
}
