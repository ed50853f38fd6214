// Command pause is the sandbox image's program: it holds a Pod's namespaces
// and waits to be told to stop. Static, so it lives alone in its image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
