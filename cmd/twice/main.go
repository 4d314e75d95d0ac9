// Command twice is the stock twice binary (twicecli.Stock): every command
// for any twice database, the dashboard and 'twice demo'. To work your own
// kinds, build your own binary with twicecli.Main(registry).
package main

import "github.com/twicejobs/twice/twicecli"

func main() { twicecli.Stock().Main() }
