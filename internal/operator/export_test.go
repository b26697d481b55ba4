package operator

// SlimPod is slimPod, for the tests on the dev cluster.
var SlimPod = slimPod
