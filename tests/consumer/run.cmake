# written next
