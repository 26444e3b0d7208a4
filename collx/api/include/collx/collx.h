// collx: the public API in one include.
#pragma once

#include "collx/base/config.h"
#include "collx/base/data_type.h"
#include "collx/base/error.h"
#include "collx/base/reduce_op.h"
#include "collx/base/setting.h"
#include "collx/base/version.h"
#include "collx/bootstrap.h"
#include "collx/call.h"
#include "collx/collectives.h"
#include "collx/context.h"
#include "collx/flight_record.h"
#include "collx/rendezvous/file_store.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/prefix_store.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
