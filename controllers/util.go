package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func ctrlKey(o client.Object) client.ObjectKey { return client.ObjectKeyFromObject(o) }
