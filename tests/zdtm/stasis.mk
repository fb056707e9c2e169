# CRIU's zdtm rules for stasis's own tests, as test/zdtm/static has them:
# scripts/zdtm.sh copies this folder into test/zdtm/stasis of the tree it
# extracts from CRIU's tarball, this file as its Makefile.
LIBDIR	:= ../lib
LIB	:= $(LIBDIR)/libzdtmtst.a
LDLIBS	+= $(LIB)
CPPFLAGS += -I$(LIBDIR)

TST	:= anon256 tree128
SRC	:= $(TST:%=%.c)
OBJ	:= $(SRC:%.c=%.o)
DEP	:= $(SRC:%.c=%.d)
PID	:= $(TST:%=%.pid)
OUT	:= $(TST:%=%.out)

include ../Makefile.inc

all:	$(TST)
.PHONY: all

$(TST:%=%.pid):	%.pid:	%
	$(<D)/$(<F) --pidfile=$@ --outfile=$<.out

%.out:	%.pid %
	-kill -TERM `cat $<`

$(TST):	| $(LIB)
