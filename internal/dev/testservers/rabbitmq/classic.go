package rabbitmq

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DeclareClassicQueue declares a durable classic queue through member i,
// which is then its home (classic queues live on the node that declared
// them). Declaring it again does nothing.
func (c *Cluster) DeclareClassicQueue(i int, name string) error {
	conn, ch, err := dial(c.URL(i))
	if err != nil {
		return fmt.Errorf("declaring %s through %s: %w", name, c.members[i].name, err)
	}
	defer conn.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring %s through %s: %w", name, c.members[i].name, err)
	}
	return nil
}

// CheckQueue declares a queue passively through member i: nil when the
// queue is there and usable, else what the broker answered, such as an
// *amqp.Error with Code amqp.NotFound for a durable classic queue whose home
// node is down ("home node ... is down or inaccessible").
func (c *Cluster) CheckQueue(i int, name string) error {
	conn, ch, err := dial(c.URL(i))
	if err != nil {
		return fmt.Errorf("checking %s through %s: %w", name, c.members[i].name, err)
	}
	defer conn.Close()
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		return fmt.Errorf("checking %s through %s: %w", name, c.members[i].name, err)
	}
	return nil
}

// Fill publishes n persistent messages to a queue through member i, each
// confirmed by the broker before the next, and returns their ids (the
// message's MessageId, prefix-0 to prefix-(n-1)).
func (c *Cluster) Fill(i int, queue, prefix string, n int) ([]string, error) {
	conn, ch, err := dial(c.URL(i))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := ch.Confirm(false); err != nil {
		return nil, err
	}
	ids := make([]string, 0, n)
	for k := range n {
		id := fmt.Sprintf("%s-%d", prefix, k)
		dc, err := ch.PublishWithDeferredConfirm("", queue, true, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent, MessageId: id, Body: []byte(id)})
		if err != nil {
			return ids, fmt.Errorf("publishing %s to %s: %w", id, queue, err)
		}
		if !dc.Wait() {
			return ids, fmt.Errorf("publishing %s to %s: the broker refused it (nack)", id, queue)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Take consumes every message of a queue through member i, acknowledging
// each, until the queue answers empty, and returns the message ids in the
// order received. An error names what the broker said (such as a queue
// whose home node is down).
func (c *Cluster) Take(i int, queue string) ([]string, error) {
	conn, ch, err := dial(c.URL(i))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var ids []string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		d, ok, err := ch.Get(queue, false)
		if err != nil {
			return ids, fmt.Errorf("consuming %s through %s: %w", queue, c.members[i].name, err)
		}
		if !ok {
			return ids, nil
		}
		ids = append(ids, d.MessageId)
		if err := d.Ack(false); err != nil {
			return ids, err
		}
	}
	return ids, fmt.Errorf("consuming %s through %s: still not empty after a minute", queue, c.members[i].name)
}

// HoldExclusive declares an exclusive queue through member i with n
// messages in it; the queue lives as long as the returned connection.
func (c *Cluster) HoldExclusive(i int, n int) (name string, conn *amqp.Connection, err error) {
	conn, ch, err := dial(c.URL(i))
	if err != nil {
		return "", nil, err
	}
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err == nil {
		err = ch.Confirm(false)
	}
	for k := 0; err == nil && k < n; k++ {
		var dc *amqp.DeferredConfirmation
		if dc, err = ch.PublishWithDeferredConfirm("", q.Name, true, false, amqp.Publishing{Body: []byte("exclusive")}); err == nil && !dc.Wait() {
			err = fmt.Errorf("the broker refused a message to %s", q.Name)
		}
	}
	if err != nil {
		conn.Close()
		return "", nil, err
	}
	return q.Name, conn, nil
}
