// Package condition sets status conditions the way every vacate controller
// does: the message capped at v1alpha1.MaxMessage runes, so that a status
// stays small whatever the pods' names or the API server's messages.
package condition

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// Set sets the condition in conds (meta.SetStatusCondition: the transition
// time changes only with the status), its message capped by Cap.
func Set(conds *[]metav1.Condition, c metav1.Condition) {
	c.Message = Cap(c.Message)
	meta.SetStatusCondition(conds, c)
}

// Cap cuts a condition message to v1alpha1.MaxMessage runes.
func Cap(msg string) string { return v1alpha1.Truncate(msg, v1alpha1.MaxMessage) }
