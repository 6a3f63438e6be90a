package controllers

import arv1 "github.com/agentrun-dev/agentrun-operator/api/v1alpha1"

// treeUsage sums this run's usage and its children's tree usage. Cost is
// unknown if any part is.
func treeUsage(own arv1.Usage, children []arv1.AgentRun) *arv1.Usage {
	if len(children) == 0 {
		return nil
	}
	t := own
	for i := range children {
		c := children[i].Status.Usage
		if tu := children[i].Status.TreeUsage; tu != nil {
			c = *tu
		}
		addUsage(&t, c)
	}
	return &t
}
