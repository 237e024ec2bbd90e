package validate

import "strings"

// TopicPatternMatches says a grant's topic pattern names topic: "*" names
// every topic and calls naming none (topic ""), "prefix*" the topics
// starting with prefix, anything else the one topic of that name. The
// meta group stores grants and the proxies enforce them with this one
// rule.
func TopicPatternMatches(pattern, topic string) bool {
	switch {
	case pattern == "*":
		return true
	case topic == "":
		return false
	case strings.HasSuffix(pattern, "*"):
		return strings.HasPrefix(topic, strings.TrimSuffix(pattern, "*"))
	}
	return pattern == topic
}
