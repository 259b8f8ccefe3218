// The OpenAI Agents SDK against foliko: node agents.mjs SCENARIO API MODEL [ARGS...]
// API is "responses" (the SDK's default) or "chat_completions".
import {
  Agent,
  OpenAIConversationsSession,
  run,
  setDefaultOpenAIClient,
  setOpenAIAPI,
  setTracingDisabled,
  tool,
} from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";

import { apiKey, baseURL, loggingFetch, main } from "./foliko.mjs";

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, fetch: loggingFetch });
setDefaultOpenAIClient(client);
setTracingDisabled(true);

const weather = tool({
  name: "get_weather",
  description: "The weather in a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny in ${city}`,
});

function agentFor(api, model) {
  setOpenAIAPI(api);
  return new Agent({
    name: "Forecaster",
    instructions: "Answer briefly.",
    model,
    tools: [weather],
  });
}

const itemsOf = (result) =>
  result.newItems.map((item) => ({ type: item.type, raw: item.rawItem }));

await main({
  async "run-tool"(api, model, prompt) {
    const agent = agentFor(api, model);
    const result = await run(agent, prompt);
    const streamed = await run(agent, prompt, { stream: true });
    const events = [];
    for await (const event of streamed) events.push(event.type);
    await streamed.completed;
    return {
      finalOutput: result.finalOutput,
      items: itemsOf(result),
      streamed: { finalOutput: streamed.finalOutput, items: itemsOf(streamed), events },
    };
  },

  async "session"(api, model, ...turns) {
    const session = new OpenAIConversationsSession({ client });
    const agent = agentFor(api, model);
    const outputs = [];
    for (const turn of turns) {
      const result = await run(agent, turn, { session });
      outputs.push(result.finalOutput);
    }
    return { conversation: await session.getSessionId(), outputs, items: await session.getItems() };
  },
});
